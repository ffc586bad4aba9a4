/**
 * The server process's memory now, bytes: its resident set (anonymous memory, plus the pages of
 * files it maps, such as a memory-mapped model, counted in full), from `process.memoryUsage.rss()`,
 * which reads `/proc/self/stat` on Linux: about 10 µs whatever the process holds. Its proportional
 * set size (PSS, `/proc/self/smaps_rollup`) would count pages shared with other processes by share,
 * but the kernel walks every resident page to sum it: 8 ms at 760 MB (measured), and a model load
 * read the memory five or six times on its way, on the request's path. The two move together when
 * a model loads or unloads (what the budget counts), and the resident set is the larger, so a
 * budget kept in it is kept in PSS too.
 */
export function readProcessMemoryBytes(): number {
  return process.memoryUsage.rss();
}

/** glibc's MALLOC_MMAP_THRESHOLD_ for the serving process (bytes, as the environment variable's value). */
export declare const MALLOC_MMAP_THRESHOLD_BYTES: string;

/**
 * Start-up progress: a live line on a terminal, plain lines in a log. The printer is driven with
 * the events startServer reports; the stream is an in-memory Writable standing in for stdout.
 */
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createStartupProgress } from '../src/startup-progress.ts';

function memoryStream(columns?: number): Writable & { text: () => string; columns?: number } {
  let text = '';
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      text += chunk.toString();
      done();
    },
  }) as Writable & { text: () => string; columns?: number };
  stream.text = () => text;
  if (columns !== undefined) stream.columns = columns;
  return stream;
}

describe('start-up progress', () => {
  it('writes one plain line per step when the output is not a terminal (the log)', () => {
    const stream = memoryStream();
    const progress = createStartupProgress({ stream, isTty: false });
    progress.onProgress({ phase: 'loading', url: 'resnet-152.mar', sizeBytes: 230_000_000 });
    progress.onProgress({ phase: 'loading', url: 'broken.mar' });
    progress.onProgress({
      phase: 'loaded',
      url: 'resnet-152.mar',
      modelName: 'resnet-152',
      modelVersion: '1.0',
      elapsedMs: 6100,
    });
    progress.onProgress({ phase: 'failed', url: 'broken.mar', elapsedMs: 10 });
    progress.stop();
    expect(stream.text()).toBe(
      'Loading model resnet-152.mar (230.0 MB)...\nLoading model broken.mar...\nModel resnet-152 (version 1.0) ready in 6.1 s\n',
    );
  });

  it('keeps a live line on a terminal, clears it for each finished model and at the end', () => {
    const stream = memoryStream(60);
    const progress = createStartupProgress({ stream, isTty: true });
    progress.onProgress({ phase: 'loading', url: 'resnet-152.mar', sizeBytes: 230_000_000 });
    // biome-ignore lint/suspicious/noControlCharactersInRegex: on a terminal the progress line is redrawn with ESC [2K.
    expect(stream.text()).toMatch(/^\r\x1b\[2KLoading and optimising resnet-152\.mar \(230\.0 MB\): \d+\.\d s$/);
    progress.onProgress({
      phase: 'loaded',
      url: 'resnet-152.mar',
      modelName: 'resnet-152',
      modelVersion: '1.0',
      elapsedMs: 6100,
    });
    expect(stream.text().endsWith('\r\x1b[2KModel resnet-152 (version 1.0) ready in 6.1 s\n')).toBe(true);
    progress.stop();
    // Nothing is redrawn once every model has finished.
    const after = stream.text();
    progress.stop();
    expect(stream.text()).toBe(after);
  });

  it('cuts the live line to the terminal width', () => {
    const stream = memoryStream(30);
    const progress = createStartupProgress({ stream, isTty: true });
    progress.onProgress({ phase: 'loading', url: 'a-model-with-a-long-name.mar' });
    const line = stream.text().replace('\r\x1b[2K', '');
    expect(line.length).toBeLessThanOrEqual(29);
    expect(line.endsWith('…')).toBe(true);
    progress.stop();
  });
});

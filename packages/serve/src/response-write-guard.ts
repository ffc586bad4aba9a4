/**
 * Bounds what answers nobody reads can hold. Node keeps every byte of a response the client has
 * not taken in the socket's write buffer, for as long as the connection lives: a client that posts
 * a request and never reads its answer holds that memory for ever. The guard watches every
 * connection of the HTTP listeners: one whose pending bytes made no progress for
 * `response_write_timeout` is closed (its buffers go with it), and while the bytes pending over all
 * connections exceed `max_pending_response_bytes`, the stalled connections holding the most are
 * closed first. Connections that keep taking bytes are never closed, however slow.
 */
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

export interface ResponseWriteGuardOptions {
  /** response_write_timeout: most time a connection's pending answer may make no progress, ms. */
  timeoutMs: number;
  /** max_pending_response_bytes: bytes pending over all connections before stalled ones are closed. */
  maxPendingBytes: number;
  /** Told about each connection closed, and why (for the server's log). */
  onClose?: (event: { reason: 'timeout' | 'pending-bytes'; pendingBytes: number; remote: string }) => void;
}

interface Watched {
  /** `socket.bytesWritten` at the last look. */
  bytesWritten: number;
  /** When its pending bytes were last seen moving (or first seen waiting), ms (performance.now()). */
  progressAt: number;
}

/** Watches the connections of HTTP listeners; see the module comment. */
export class ResponseWriteGuard {
  readonly timeoutMs: number;
  readonly maxPendingBytes: number;
  readonly #onClose: ResponseWriteGuardOptions['onClose'];
  readonly #sockets = new Map<Socket, Watched>();
  readonly #servers = new Set<Server>();
  #timer: NodeJS.Timeout | undefined;
  #pendingBytes = 0;
  #closedCount = 0;

  constructor(options: ResponseWriteGuardOptions) {
    this.timeoutMs = options.timeoutMs;
    this.maxPendingBytes = options.maxPendingBytes;
    this.#onClose = options.onClose;
  }

  /** Bytes of answers written by the server and not yet taken by their clients, over every watched connection, at the last look. */
  get pendingBytes(): number {
    return this.#pendingBytes;
  }

  /** Connections closed because their answers made no progress or held too much. */
  get closedCount(): number {
    return this.#closedCount;
  }

  /** Watches every connection `server` accepts from now on (TLS connections once their handshake is done). */
  watch(server: Server): void {
    if (this.#servers.has(server)) return;
    this.#servers.add(server);
    const isTls = typeof (server as { addContext?: unknown }).addContext === 'function';
    server.on(isTls ? 'secureConnection' : 'connection', (socket: Socket) => {
      this.#sockets.set(socket, { bytesWritten: socket.bytesWritten, progressAt: performance.now() });
      socket.once('close', () => this.#sockets.delete(socket));
    });
    if (this.#timer === undefined) {
      // Often enough that a connection is closed within a quarter of the timeout after it.
      const intervalMs = Math.max(10, Math.min(1000, Math.floor(this.timeoutMs / 4)));
      this.#timer = setInterval(() => this.check(), intervalMs);
      this.#timer.unref();
    }
  }

  /** One look at every connection (the timer calls it; exposed for a deterministic check). */
  check(now: number = performance.now()): void {
    let total = 0;
    const stalled: Array<{ socket: Socket; pending: number }> = [];
    for (const [socket, watched] of this.#sockets) {
      const pending = socket.writableLength;
      const written = socket.bytesWritten;
      if (pending === 0 || written !== watched.bytesWritten) {
        watched.bytesWritten = written;
        watched.progressAt = now;
      } else if (now - watched.progressAt >= this.timeoutMs) {
        this.#close(socket, 'timeout', pending);
        continue;
      }
      if (pending > 0 && written === watched.bytesWritten && watched.progressAt !== now)
        stalled.push({ socket, pending });
      total += pending;
    }
    if (total > this.maxPendingBytes) {
      stalled.sort((a, b) => b.pending - a.pending);
      for (const { socket, pending } of stalled) {
        if (total <= this.maxPendingBytes) break;
        this.#close(socket, 'pending-bytes', pending);
        total -= pending;
      }
    }
    this.#pendingBytes = total;
  }

  #close(socket: Socket, reason: 'timeout' | 'pending-bytes', pendingBytes: number): void {
    this.#sockets.delete(socket);
    this.#closedCount += 1;
    this.#onClose?.({ reason, pendingBytes, remote: `${socket.remoteAddress ?? '-'}:${socket.remotePort ?? 0}` });
    socket.destroy();
  }

  /** Stops watching (the listeners are closing). */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#sockets.clear();
  }
}

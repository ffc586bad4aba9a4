import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { benchErrors } from './errors.ts';
import type { LoadResult } from './load-generator.ts';

const PROTOS = fileURLToPath(new URL('../../serve/protos/', import.meta.url));

export interface GrpcLoadOptions {
  /** host:port of the gRPC inference API. */
  target: string;
  /** A ModelInferRequest (OIP `inference.GRPCInferenceService`), sent as is. */
  request: Record<string, unknown>;
  concurrency: number;
  requests: number;
  durationMs?: number;
  warmupRequests?: number;
  onProgress?: (done: number) => void;
}

type InferClient = grpc.Client & {
  ModelInfer(request: unknown, callback: (error: grpc.ServiceError | null, value: unknown) => void): void;
};

/**
 * The gRPC twin of runLoad: `concurrency` closed-loop clients calling ModelInfer over one
 * HTTP/2 channel (as a gRPC client does), recording each call's latency.
 * @throws MARINA_ERR_BENCH_REQUESTS_FAILED when every measured call failed.
 */
export async function runGrpcLoad(options: GrpcLoadOptions): Promise<LoadResult> {
  const definition = protoLoader.loadSync('grpc_predict_v2.proto', {
    keepCase: true,
    longs: Number,
    defaults: true,
    includeDirs: [PROTOS],
  });
  const pkg = grpc.loadPackageDefinition(definition) as unknown as {
    inference: {
      GRPCInferenceService: new (
        target: string,
        credentials: grpc.ChannelCredentials,
        options: grpc.ChannelOptions,
      ) => InferClient;
    };
  };
  const client = new pkg.inference.GRPCInferenceService(options.target, grpc.credentials.createInsecure(), {
    'grpc.max_receive_message_length': 64 * 1024 * 1024,
    'grpc.max_send_message_length': 64 * 1024 * 1024,
  });
  let firstError: string | undefined;
  try {
    await new Promise<void>((resolve, reject) =>
      client.waitForReady(Date.now() + 30_000, (error) => (error ? reject(error) : resolve())),
    );
    const sendOne = () =>
      new Promise<boolean>((resolve) => {
        client.ModelInfer(options.request, (error) => {
          if (error) firstError ??= `${grpc.status[error.code]}: ${error.details}`;
          resolve(!error);
        });
      });
    const drive = async (total: number, record: boolean, durationMs?: number) => {
      const latencies: number[] = [];
      let started = 0;
      let errors = 0;
      const begin = performance.now();
      const client1 = async () => {
        while (started < total && (durationMs === undefined || performance.now() - begin < durationMs)) {
          started += 1;
          const t0 = performance.now();
          const ok = await sendOne();
          if (!record) continue;
          if (ok) latencies.push(performance.now() - t0);
          else errors += 1;
          options.onProgress?.(latencies.length + errors);
        }
      };
      await Promise.all(Array.from({ length: options.concurrency }, client1));
      return { latencies, errors, wallMs: performance.now() - begin };
    };
    if (options.warmupRequests) await drive(options.warmupRequests, false);
    const { latencies, errors, wallMs } = await drive(options.requests, true, options.durationMs);
    if (latencies.length === 0 && errors > 0)
      throw benchErrors.create.MARINA_ERR_BENCH_REQUESTS_FAILED(
        `every gRPC ModelInfer call to ${options.target} failed; first: ${firstError}`,
      );
    return {
      latenciesMs: latencies,
      wallMs,
      throughputPerSec: latencies.length / (wallMs / 1000),
      errors,
      firstError,
      headerValues: [],
    };
  } finally {
    client.close();
  }
}

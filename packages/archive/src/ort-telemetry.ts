/** onnxruntime's opt-out variable for its telemetry (onnxruntime 1.29+ on Linux and macOS). */
export const ORT_TELEMETRY_ENV = 'ORT_DISABLE_TELEMETRY';

/**
 * Turns onnxruntime's telemetry off for this process and its children unless the user set
 * ORT_DISABLE_TELEMETRY: a server should not phone home, and with telemetry on every process that
 * creates a session leaves an empty `mat-debug-<pid>.log` and a `.ses` file in $TMPDIR.
 * onnxruntime reads the variable when the first session is created, so call this on the main
 * thread before any session or worker thread (a worker's process.env is its own copy).
 */
export function defaultOrtTelemetryOff(): void {
  process.env[ORT_TELEMETRY_ENV] ??= '1';
}

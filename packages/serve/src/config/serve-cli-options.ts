/** The launcher flags that feed the configuration (see cli.ts). */
export interface ServeCliOptions {
  /** --ts-config FILE */
  tsConfig?: string;
  /** --model-store DIR */
  modelStore?: string;
  /** --models entries (`all`, `file.mar`, `name=file.mar`, URL); joined with commas into load_models. */
  models?: string[];
  /** --ncs / --no-config-snapshots: do not read (or write) config snapshots. */
  ncs?: boolean;
  /** --disable-token-auth / --dt: only ever turns token authorization off. */
  disableTokenAuth?: boolean;
  /** --enable-model-api: only ever turns the model API on. */
  enableModelApi?: boolean;
  /** --log-config FILE: must exist (TorchServe exits 1 otherwise); Marina's log layout is fixed, so it is not applied. */
  logConfig?: string;
  /** --workflow-store DIR (workflow_store). */
  workflowStore?: string;
  /** --plugins-path / --ppath DIR (plugins_path). */
  pluginsPath?: string;
  /** --foreground */
  foreground?: boolean;
}

export * from './server-config.ts';
export { configErrors, configError } from './config-errors.ts';
export {
  loadConfig,
  findConfigFile,
  resolveServerConfig,
  configFromProperties,
  assertModelStoreConfigured,
  resolveLogDir,
  deepFreeze,
  SNAPSHOT_FILE_PATTERN,
  type ServeCliOptions,
  type LoadConfigOptions,
  type ConfigFileSource,
} from './load-config.ts';
export { parseProperties, type ParsedProperties, type PropertyEntry } from './properties-parser.ts';
export { parseListenAddress, isLoopbackHost } from './parse-listen-address.ts';
export { parseLoadModels } from './parse-load-models.ts';
export {
  pidFilePath,
  readPidFile,
  writePidFile,
  removePidFile,
  isServerProcessAlive,
  type PidFileContent,
} from './pid-file.ts';
export { parseModelsJsonSyntax, normaliseModels } from './models-json.ts';

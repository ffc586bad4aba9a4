import { describe, expect, it } from 'vitest';
import {
  ARCHIVER_VERSION,
  createManifest,
  formatCreatedOn,
  modelNameFromArchivePath,
  normalizeManifest,
  parseManifest,
  serializeManifest,
} from '../src/index.ts';
import { manifestText } from '../test-support/fixtures.ts';

describe('manifest as TorchServe writes it', () => {
  it('uses TorchServe key order and leaves unset optional keys out', () => {
    const manifest = createManifest({
      modelName: 'densenet161',
      modelVersion: '1.0',
      handler: 'image_classifier',
      serializedFile: 'model.onnx',
      modelFile: 'model.py',
      requirementsFile: 'requirements.txt',
      configFile: 'model-config.yaml',
      createdOn: new Date(2025, 2, 17, 11, 20, 57),
    });
    expect(Object.keys(manifest)).toEqual(['createdOn', 'runtime', 'model', 'archiverVersion']);
    expect(Object.keys(manifest.model)).toEqual([
      'modelName',
      'serializedFile',
      'handler',
      'modelFile',
      'modelVersion',
      'requirementsFile',
      'configFile',
    ]);
    expect(manifest).toEqual({
      createdOn: '17/03/2025 11:20:57',
      runtime: 'python',
      model: {
        modelName: 'densenet161',
        serializedFile: 'model.onnx',
        handler: 'image_classifier',
        modelFile: 'model.py',
        modelVersion: '1.0',
        requirementsFile: 'requirements.txt',
        configFile: 'model-config.yaml',
      },
      archiverVersion: ARCHIVER_VERSION,
    });
    const minimal = createManifest({ modelName: 'm', modelVersion: '2', handler: 'tensor' });
    expect(Object.keys(minimal.model)).toEqual(['modelName', 'handler', 'modelVersion']);
  });

  it('formats createdOn as %d/%m/%Y %H:%M:%S in local time with zero padding', () => {
    expect(formatCreatedOn(new Date(2024, 0, 5, 3, 4, 9))).toBe('05/01/2024 03:04:09');
  });

  it('serializes with two-space indentation like json.dumps(indent=2)', () => {
    const text = serializeManifest(
      createManifest({ modelName: 'm', modelVersion: '1.0', handler: 'tensor', createdOn: new Date(2024, 0, 1) }),
    );
    expect(text.split('\n')[1]).toBe('  "createdOn": "01/01/2024 00:00:00",');
  });

  it('reads a manifest with old MMS keys such as modelServerVersion and specificationVersion', () => {
    const manifest = parseManifest(
      manifestText(
        { description: 'x' },
        { modelServerVersion: '1.0', specificationVersion: '1.0', implementationVersion: '1.0' },
      ),
    );
    expect(manifest.model.modelName).toBe('tiny');
    expect(manifest.modelServerVersion).toBe('1.0');
  });

  it('rejects a manifest without model.modelVersion, naming the key', () => {
    expect(() => parseManifest(JSON.stringify({ model: { modelName: 'x' } }))).toThrow(
      expect.objectContaining({
        code: 'MARINA_ERR_ARCHIVE_MANIFEST_INVALID',
        message: expect.stringContaining("'modelVersion'"),
      }),
    );
    expect(() => parseManifest('{ not json')).toThrow(
      expect.objectContaining({ code: 'MARINA_ERR_ARCHIVE_MANIFEST_INVALID' }),
    );
  });

  it('fills the defaults TorchServe fills for an archive without a manifest', () => {
    expect(normalizeManifest(undefined, { archivePath: '/store/my-model.v2.mar' }).model).toEqual({
      modelName: 'my_model_v2',
      modelVersion: '1.0',
    });
    expect(
      normalizeManifest(undefined, { archivePath: '/store/resnet.tar.gz', handler: 'image_classifier', modelName: 'r' })
        .model,
    ).toEqual({ modelName: 'r', modelVersion: '1.0', handler: 'image_classifier' });
    const kept = normalizeManifest(parseManifest(manifestText()), { archivePath: '/store/other.mar' });
    expect(kept.model.modelName).toBe('tiny');
    expect(modelNameFromArchivePath('/store/folder-model/')).toBe('folder_model');
  });
});

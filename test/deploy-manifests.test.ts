/**
 * The deployment manifests, rendered and validated offline:
 * - deploy/kubernetes/ renders with `kubectl kustomize` (kubectl's built-in Kustomize; no cluster),
 *   and each object validates with the npm schema models (kubernetes-models for Deployment, Service,
 *   ConfigMap, PersistentVolumeClaim; @kubernetes-models/prometheus-operator for the ServiceMonitor;
 *   @kubernetes-models/keda for the ScaledObject). Those models check types and required fields but
 *   not unknown fields, so the fields Marina depends on are also asserted one by one.
 * - its config.properties loads in Marina's own config loader without a warning;
 * - deploy/kserve/ validates against KServe's CRD schemas (deploy/kserve/crds/, copied from
 *   kserve/kserve, source in their README), read as the API server reads them: unknown fields are
 *   errors; its ports (REST v2 on 8080, gRPC v2 on the h2c port 7070, metrics) and key mount match
 *   the config.properties it ships, which Marina's loader accepts;
 * - deploy/modelmesh/ renders with `kubectl kustomize` and its ServingRuntime validates against KServe's
 *   ServingRuntime CRD: multi-model, its gRPC endpoints the ports its config.properties gives the
 *   ModelMesh model-runtime SPI and OIP gRPC.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Ajv } from 'ajv';
import { ConfigMap, PersistentVolumeClaim, Service } from 'kubernetes-models/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { parse, parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { configFromProperties } from '@marina/serve';
import { repoRoot } from './helpers.ts';

type Manifest = {
  apiVersion: string;
  kind: string;
  metadata: { name: string };
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
};

function render(): Manifest[] {
  const text = execFileSync('kubectl', ['kustomize', path.join(repoRoot, 'deploy/kubernetes')], { encoding: 'utf8' });
  return parseAllDocuments(text).map((document) => document.toJS() as Manifest);
}

describe('deploy/kubernetes (kubectl kustomize)', () => {
  const manifests = render();
  const byKind = (kind: string): Manifest => {
    const found = manifests.filter((manifest) => manifest.kind === kind);
    expect(found, kind).toHaveLength(1);
    return found[0]!;
  };

  it('renders a ConfigMap, Service, PersistentVolumeClaim, Deployment, ServiceMonitor and ScaledObject that validate', () => {
    expect(manifests.map((manifest) => manifest.kind).sort()).toEqual([
      'ConfigMap',
      'Deployment',
      'PersistentVolumeClaim',
      'ScaledObject',
      'Service',
      'ServiceMonitor',
    ]);
    const models: Record<string, (value: never) => { validate(): void }> = {
      ConfigMap: (value) => new ConfigMap(value),
      Service: (value) => new Service(value),
      PersistentVolumeClaim: (value) => new PersistentVolumeClaim(value),
      Deployment: (value) => new Deployment(value),
      ServiceMonitor: (value) => new ServiceMonitor(value),
      ScaledObject: (value) => new ScaledObject(value),
    };
    for (const manifest of manifests)
      expect(() => models[manifest.kind]!(manifest as never).validate(), manifest.kind).not.toThrow();
    // The validators are not vacuous.
    const broken = structuredClone(byKind('Deployment')) as unknown as {
      spec: { template: { spec: { containers: Array<{ image: unknown }> } } };
    };
    broken.spec.template.spec.containers[0]!.image = 5;
    expect(() => new Deployment(broken as never).validate()).toThrow(/image must be string/);
  });

  it('runs serve non-root with probes on the open /ping, resources, the config, the keys Secret and the model store', () => {
    const deployment = byKind('Deployment') as unknown as { spec: { template: { spec: Record<string, any> } } };
    const pod = deployment.spec.template.spec;
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 10001 });
    const [container] = pod.containers as Array<Record<string, any>>;
    expect(container!.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
    expect(
      container!.ports.map((port: { name: string; containerPort: number }) => [port.name, port.containerPort]),
    ).toEqual([
      ['inference', 8080],
      ['management', 8081],
      ['metrics', 8082],
      ['grpc-inference', 7070],
    ]);
    for (const probe of ['startupProbe', 'livenessProbe', 'readinessProbe'])
      expect(container![probe].httpGet, probe).toEqual({ path: '/ping', port: 'inference' });
    expect(container!.resources.requests).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) });
    expect(container!.resources.limits).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) });
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(120);

    const configMap = byKind('ConfigMap');
    const volumes = Object.fromEntries(
      (pod.volumes as Array<{ name: string }>).map((volume) => [volume.name, volume]),
    ) as Record<string, any>;
    expect(volumes.config.configMap.name).toBe(configMap.metadata.name);
    expect(volumes.keys.secret.secretName).toBe('marina-keys');
    expect(volumes['model-store'].persistentVolumeClaim.claimName).toBe(byKind('PersistentVolumeClaim').metadata.name);
    const mounts = Object.fromEntries(
      (container!.volumeMounts as Array<{ name: string; mountPath: string }>).map((mount) => [
        mount.name,
        mount.mountPath,
      ]),
    );
    expect(container!.args).toEqual(['--ts-config', mounts.config]);

    // The config the pod reads: Marina's loader accepts every key, and it points at the mounts.
    const properties = configMap.data!['config.properties']!;
    const entries = properties
      .split('\n')
      .filter((line) => line.trim() !== '' && !line.startsWith('#'))
      .map((line) => line.split(/=(.*)/s).slice(0, 2) as [string, string]);
    const values = Object.fromEntries(entries);
    expect(values.model_store).toBe(mounts['model-store']);
    // The loader checks that the model store exists: one that does here stands in for the volume.
    const config = configFromProperties({ ...values, model_store: repoRoot }, { cwd: '/home/marina', env: {} });
    expect(config.warnings).toEqual([]);
    expect(config.keyFilePath).toBe(`${mounts.keys}/key_file.json`);
    expect(config.isKeyFileProvided).toBe(true);
    expect(config.disableTokenAuthorization).toBe(false);
    expect([config.inferenceAddress.port, config.managementAddress.port, config.metricsAddress.port]).toEqual([
      8080, 8081, 8082,
    ]);
    // gRPC inference listens on the pod's address, on the port the Deployment and Service name.
    expect(config.grpc?.inference).toMatchObject({ host: '0.0.0.0', port: 7070 });
    expect(config.grpc?.management).toMatchObject({ host: '127.0.0.1', port: 7071 });
    const service = byKind('Service') as unknown as {
      spec: { ports: Array<{ name: string; port: number; targetPort: string; appProtocol?: string }> };
    };
    expect(service.spec.ports.find((port) => port.name === 'grpc-inference')).toEqual({
      name: 'grpc-inference',
      port: 7070,
      targetPort: 'grpc-inference',
      appProtocol: 'kubernetes.io/h2c',
    });
    expect(service.spec.ports.map((port) => port.name)).not.toContain('management');
  });

  it('scrapes /metrics and scales on the queue-depth metric Marina exports', () => {
    const service = byKind('Service') as unknown as { spec: { ports: Array<{ name: string }> } };
    expect(service.spec.ports.map((port) => port.name)).toContain('metrics');
    expect((byKind('ServiceMonitor') as unknown as { spec: { endpoints: unknown[] } }).spec.endpoints).toEqual([
      { port: 'metrics', path: '/metrics', interval: '15s' },
    ]);
    const scaled = byKind('ScaledObject') as unknown as {
      spec: { scaleTargetRef: { name: string }; triggers: Array<{ type: string; metadata: { query: string } }> };
    };
    expect(scaled.spec.scaleTargetRef.name).toBe(byKind('Deployment').metadata.name);
    expect(scaled.spec.triggers[0]!.type).toBe('prometheus');
    // That the metric exists on a live server is checked in deploy-grafana-metrics.test.ts.
    expect(scaled.spec.triggers[0]!.metadata.query).toMatch(/\bmarina_queue_depth\{/);
  });
});

/**
 * A CRD's openAPIV3Schema as a JSON Schema that judges as the API server does: objects with
 * `properties` refuse unknown fields unless `x-kubernetes-preserve-unknown-fields`, int-or-string
 * takes either, `nullable` admits null. Formats (int32, quantity) and CEL rules are not checked.
 */
function toJsonSchema(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(toJsonSchema);
  if (node === null || typeof node !== 'object') return node;
  const source = node as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(source)) {
    if (key.startsWith('x-kubernetes-') || key === 'format' || key === 'nullable') continue;
    out[key] =
      key === 'properties'
        ? Object.fromEntries(Object.entries(value as object).map(([name, child]) => [name, toJsonSchema(child)]))
        : toJsonSchema(value);
  }
  if (source['x-kubernetes-int-or-string']) {
    delete out.type;
    out.anyOf = [{ type: 'integer' }, { type: 'string' }];
  }
  if (source.nullable && typeof out.type === 'string') out.type = [out.type, 'null'];
  if (out.properties && out.additionalProperties === undefined && !source['x-kubernetes-preserve-unknown-fields'])
    out.additionalProperties = false;
  return out;
}

function crdValidator(file: string, version: string) {
  const crd = parse(readFileSync(path.join(repoRoot, 'deploy/kserve/crds', file), 'utf8')) as {
    spec: { names: { kind: string }; versions: Array<{ name: string; schema: { openAPIV3Schema: object } }> };
  };
  const schema = crd.spec.versions.find((candidate) => candidate.name === version)!.schema.openAPIV3Schema;
  const ajv = new Ajv({ strict: false, allErrors: true });
  const validate = ajv.compile(toJsonSchema(schema) as object);
  return { kind: crd.spec.names.kind, validate };
}

describe('deploy/kserve against KServe CRD schemas', { timeout: 120_000 }, () => {
  const runtime = parse(
    readFileSync(path.join(repoRoot, 'deploy/kserve/cluster-serving-runtime.yaml'), 'utf8'),
  ) as Record<string, any>;
  const service = parse(readFileSync(path.join(repoRoot, 'deploy/kserve/inference-service.yaml'), 'utf8')) as Record<
    string,
    any
  >;
  const grpcService = parse(
    readFileSync(path.join(repoRoot, 'deploy/kserve/inference-service-grpc.yaml'), 'utf8'),
  ) as Record<string, any>;
  /** The config.properties the storageUri carries, as Marina's loader reads it (the model store stands in for /mnt/models). */
  const kserveConfig = () => {
    const properties = readFileSync(path.join(repoRoot, 'deploy/kserve/config.properties'), 'utf8');
    const values = Object.fromEntries(
      properties
        .split('\n')
        .filter((line) => line.trim() !== '' && !line.startsWith('#'))
        .map((line) => line.split(/=(.*)/s).slice(0, 2) as [string, string]),
    );
    return {
      values,
      config: configFromProperties({ ...values, model_store: repoRoot }, { cwd: '/home/marina', env: {} }),
    };
  };

  it('validates the ClusterServingRuntime: the Open Inference Protocol over REST and gRPC, the onnx format, the serve image', () => {
    const { kind, validate } = crdValidator('serving.kserve.io_clusterservingruntimes.yaml', 'v1alpha1');
    expect(runtime.kind).toBe(kind);
    expect(runtime.apiVersion).toBe('serving.kserve.io/v1alpha1');
    expect(validate(runtime), JSON.stringify(validate.errors)).toBe(true);
    expect(runtime.spec.protocolVersions).toEqual(['v2', 'grpc-v2']);
    expect(runtime.spec.supportedModelFormats.map((format: { name: string }) => format.name)).toEqual(['onnx']);
    // Strict: a misspelt field is refused, as the API server would.
    const misspelt = structuredClone(runtime);
    misspelt.spec.protocolVersion = ['v2'];
    expect(validate(misspelt)).toBe(false);
    expect(JSON.stringify(validate.errors)).toContain('additionalProperties');
  });

  it('validates the example InferenceServices on that runtime, REST (v2) and gRPC (grpc-v2 on the h2c port)', () => {
    const { kind, validate } = crdValidator('serving.kserve.io_inferenceservices.yaml', 'v1beta1');
    for (const manifest of [service, grpcService]) {
      expect(manifest.kind).toBe(kind);
      expect(validate(manifest), JSON.stringify(validate.errors)).toBe(true);
      expect(manifest.spec.predictor.model).toMatchObject({
        runtime: runtime.metadata.name,
        modelFormat: { name: 'onnx' },
      });
      expect(runtime.spec.protocolVersions).toContain(manifest.spec.predictor.model.protocolVersion);
    }
    expect(service.spec.predictor.model.protocolVersion).toBe('v2');
    expect(grpcService.spec.predictor.model.protocolVersion).toBe('grpc-v2');
    const misspelt = structuredClone(service);
    misspelt.spec.predictor.model.runtimeName = 'kserve-marina';
    expect(validate(misspelt)).toBe(false);
  });

  it('matches the ports and key mount to the config.properties the storageUri carries, which Marina loads without a warning', () => {
    const { values, config } = kserveConfig();
    expect(config.warnings).toEqual([]);
    const [container] = runtime.spec.containers as Array<Record<string, any>>;
    expect(container!.args).toEqual(['--ts-config', '/mnt/models/config/config.properties']);
    expect(values.model_store).toBe('/mnt/models/model-store');
    // REST (v2): the runtime's port is the inference address's, on the pod's address.
    expect(container!.ports).toEqual([{ containerPort: config.inferenceAddress.port, protocol: 'TCP' }]);
    expect(config.inferenceAddress.port).toBe(8080);
    expect(values.inference_address).toBe('http://0.0.0.0:8080');
    // gRPC (grpc-v2): the h2c port is grpc_inference_port, on the pod's address.
    expect(grpcService.spec.predictor.model.ports).toEqual([
      { name: 'h2c', containerPort: config.grpc!.inference.port, protocol: 'TCP' },
    ]);
    expect(config.grpc!.inference).toMatchObject({ host: '0.0.0.0', port: 7070 });
    // Metrics where the Prometheus annotation says.
    expect(Number(runtime.spec.annotations['prometheus.kserve.io/port'])).toBe(config.metricsAddress.port);
    // Token authorization on, with the keys of the Secret the runtime mounts.
    expect(config.disableTokenAuthorization).toBe(false);
    expect(config.isKeyFileProvided).toBe(true);
    const mount = (container!.volumeMounts as Array<{ name: string; mountPath: string }>).find(
      (candidate) => `${candidate.mountPath}/key_file.json` === config.keyFilePath,
    );
    expect(mount, config.keyFilePath).toBeDefined();
    const volume = (runtime.spec.volumes as Array<{ name: string; secret?: { secretName: string } }>).find(
      (candidate) => candidate.name === mount!.name,
    );
    expect(volume?.secret?.secretName).toBe('marina-keys');
  });
});

describe('deploy/modelmesh (kubectl kustomize) against the ServingRuntime CRD', () => {
  const rendered = parseAllDocuments(
    execFileSync('kubectl', ['kustomize', path.join(repoRoot, 'deploy/modelmesh')], { encoding: 'utf8' }),
  ).map((document) => document.toJS() as Record<string, any>);
  const runtime = rendered.find((manifest) => manifest.kind === 'ServingRuntime')!;
  const configMap = rendered.find((manifest) => manifest.kind === 'ConfigMap')!;
  const kserveRuntime = parse(
    readFileSync(path.join(repoRoot, 'deploy/kserve/cluster-serving-runtime.yaml'), 'utf8'),
  ) as Record<string, any>;

  it('renders a ConfigMap and a multi-model ServingRuntime that validate (strictly, as the API server would)', () => {
    expect(rendered.map((manifest) => manifest.kind).sort()).toEqual(['ConfigMap', 'ServingRuntime']);
    expect(() => new ConfigMap(configMap as never).validate()).not.toThrow();
    const { kind, validate } = crdValidator('serving.kserve.io_servingruntimes.yaml', 'v1alpha1');
    expect(runtime.kind).toBe(kind);
    expect(runtime.apiVersion).toBe('serving.kserve.io/v1alpha1');
    expect(validate(runtime), JSON.stringify(validate.errors)).toBe(true);
    const misspelt = structuredClone(runtime);
    misspelt.spec.multiModels = true;
    expect(validate(misspelt)).toBe(false);
    expect(runtime.spec.multiModel).toBe(true);
    expect(runtime.spec.supportedModelFormats.map((format: { name: string }) => format.name)).toEqual(['onnx']);
    // The same image as the other runtime manifests.
    expect(runtime.spec.containers[0].image).toBe(kserveRuntime.spec.containers[0].image);
  });

  it('points grpcEndpoint at the model-runtime SPI and grpcDataEndpoint at OIP gRPC, from the config.properties it mounts, which Marina loads without a warning', () => {
    const [container] = runtime.spec.containers as Array<Record<string, any>>;
    const mount = (container!.volumeMounts as Array<{ name: string; mountPath: string }>)[0]!;
    expect(container!.args).toEqual(['--ts-config', `${mount.mountPath}/config.properties`, '--ncs']);
    const volume = (runtime.spec.volumes as Array<{ name: string; configMap?: { name: string } }>).find(
      (candidate) => candidate.name === mount.name,
    );
    expect(volume?.configMap?.name).toBe(configMap.metadata.name);
    const properties = configMap.data['config.properties'] as string;
    const values = Object.fromEntries(
      properties
        .split('\n')
        .filter((line) => line.trim() !== '' && !line.startsWith('#'))
        .map((line) => line.split(/=(.*)/s).slice(0, 2) as [string, string]),
    );
    // The storage helper's /models is the model store; the loader needs it to exist, so the repository stands in.
    expect(values.model_store).toBe('/models');
    expect(values.allowed_urls).toBe('file:///models/.*');
    const config = configFromProperties({ ...values, model_store: repoRoot }, { cwd: '/home/marina', env: {} });
    expect(config.warnings).toEqual([]);
    expect(runtime.spec.grpcEndpoint).toBe(`port:${config.modelMeshRuntime!.port}`);
    expect(runtime.spec.grpcDataEndpoint).toBe(`port:${config.grpc!.inference.port}`);
    // Only the ModelMesh container of the pod calls Marina.
    for (const host of [
      config.modelMeshRuntime!.host,
      config.grpc!.inference.host,
      config.inferenceAddress.host,
      config.managementAddress.host,
    ])
      expect(host).toBe('127.0.0.1');
    // The capacity Marina reports to ModelMesh.
    expect(config.residency?.memoryBudgetBytes).toBeGreaterThan(0);
  });
});

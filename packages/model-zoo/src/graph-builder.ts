import type onnxProto from 'onnx-proto';
import type { GraphSpec, TensorSource, ValueInfoSpec } from './onnx-model-writer.ts';
import type { Prng } from './prng.ts';

type NodeProto = onnxProto.onnx.INodeProto;
type AttributeProto = onnxProto.onnx.IAttributeProto;

/** Attribute values the model zoo needs: ints, floats and int lists. */
export type AttributeValue = number | readonly number[] | { float: number };

// AttributeProto.AttributeType values (ONNX schema).
const ATTRIBUTE_FLOAT = 1;
const ATTRIBUTE_INT = 2;
const ATTRIBUTE_INTS = 7;

function attribute(name: string, value: AttributeValue): AttributeProto {
  if (typeof value === 'number') return { name, type: ATTRIBUTE_INT, i: value };
  if ('float' in value) return { name, type: ATTRIBUTE_FLOAT, f: value.float };
  return { name, type: ATTRIBUTE_INTS, ints: [...value] };
}

/** Collects nodes and lazily generated initializers into a `GraphSpec`. */
export class GraphBuilder {
  private readonly nodes: NodeProto[] = [];
  private readonly initializers: TensorSource[] = [];
  private nodeCount = 0;

  constructor(private readonly name: string) {}

  /** Adds an initializer filled by `fill` when the model is written; returns its name. */
  initializer(name: string, dims: readonly number[], fill: (out: Float32Array) => void): string {
    this.initializers.push({ name, dims, fill });
    return name;
  }

  /** Adds a uniform initializer in [-bound, bound) drawn from `prng` at write time. */
  uniform(name: string, dims: readonly number[], prng: Prng, bound: number): string {
    return this.initializer(name, dims, (out) => prng.fillUniform(out, bound));
  }

  /** Adds a constant-filled initializer. */
  constant(name: string, dims: readonly number[], value: number): string {
    return this.initializer(name, dims, (out) => out.fill(value));
  }

  /** Adds a node with one output (named `output` or generated) and returns the output's name. */
  node(
    opType: string,
    inputs: readonly string[],
    options: { output?: string; attributes?: Record<string, AttributeValue> } = {},
  ): string {
    this.nodeCount += 1;
    const output = options.output ?? `${opType.toLowerCase()}_${this.nodeCount}`;
    this.nodes.push({
      name: `${opType}_${this.nodeCount}`,
      opType,
      domain: '',
      input: [...inputs],
      output: [output],
      attribute: Object.entries(options.attributes ?? {}).map(([key, value]) => attribute(key, value)),
    });
    return output;
  }

  /** Adds a fully specified node (for what `node` cannot express, such as graph attributes). */
  rawNode(node: NodeProto): void {
    this.nodeCount += 1;
    this.nodes.push({ name: `${node.opType}_${this.nodeCount}`, domain: '', ...node });
  }

  build(inputs: readonly ValueInfoSpec[], outputs: readonly ValueInfoSpec[]): GraphSpec {
    return { name: this.name, nodes: this.nodes, inputs, outputs, initializers: this.initializers };
  }
}

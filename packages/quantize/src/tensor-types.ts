import { DataType, type ModelProto, type NodeProto } from './onnx-model.ts';

const INT64_OUTPUT_OPS = new Set(['Shape', 'Size', 'NonZero', 'ArgMax', 'ArgMin', 'NonMaxSuppression']);
const BOOL_OUTPUT_OPS = new Set([
  'Equal',
  'Less',
  'LessOrEqual',
  'Greater',
  'GreaterOrEqual',
  'Not',
  'And',
  'Or',
  'Xor',
  'IsNaN',
  'IsInf',
]);

function outputType(node: NodeProto, index: number, types: Map<string, number>): number | undefined {
  const op = node.opType ?? '';
  if (INT64_OUTPUT_OPS.has(op)) return DataType.INT64;
  if (BOOL_OUTPUT_OPS.has(op)) return DataType.BOOL;
  if ((op === 'TopK' || op === 'MaxPool' || op === 'Unique') && index > 0) return DataType.INT64;
  if (op === 'Cast') return Number((node.attribute ?? []).find((a) => a.name === 'to')?.i ?? 0);
  if (op === 'Constant' || op === 'ConstantOfShape') {
    const value = (node.attribute ?? []).find((a) => a.name === 'value');
    if (value?.t) return value.t.dataType ?? DataType.FLOAT;
    if (op === 'ConstantOfShape') return DataType.FLOAT;
    const a = (node.attribute ?? [])[0];
    if (a?.name === 'value_float' || a?.name === 'value_floats') return DataType.FLOAT;
    return DataType.INT64;
  }
  if (op === 'Where') return types.get(node.input?.[1] ?? '');
  if (op === 'DequantizeLinear') return DataType.FLOAT;
  if (op === 'QuantizeLinear') return types.get(node.input?.[2] ?? '') ?? DataType.UINT8;
  // Most operators give the element type of their first typed input.
  for (const input of node.input ?? []) {
    const t = types.get(input);
    if (t !== undefined) return t;
  }
  return undefined;
}

/**
 * The element type of every tensor the graph names, from the model's own value_info where
 * it has it and otherwise propagated through the nodes (in graph order, which ONNX requires
 * to be topological). Tensors whose type cannot be told are absent.
 */
export function inferTensorTypes(model: ModelProto): Map<string, number> {
  const graph = model.graph ?? {};
  const types = new Map<string, number>();
  for (const vi of [...(graph.input ?? []), ...(graph.valueInfo ?? []), ...(graph.output ?? [])]) {
    const t = vi.type?.tensorType?.elemType;
    if (vi.name && t) types.set(vi.name, t);
  }
  for (const init of graph.initializer ?? []) if (init.name) types.set(init.name, init.dataType ?? DataType.FLOAT);
  for (const node of graph.node ?? []) {
    (node.output ?? []).forEach((name, i) => {
      if (!name || types.has(name)) return;
      const t = outputType(node, i, types);
      if (t) types.set(name, t);
    });
  }
  return types;
}

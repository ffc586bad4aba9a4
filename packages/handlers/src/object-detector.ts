import type { MarinaError } from '@marina/errors';
import { createHandlerError } from './errors.ts';
import {
  createImageModelRunner,
  prepareImageModelRunner,
  numberAt,
  type DecodedImages,
  type ImageModelRunner,
  type ImageOutput,
} from './image-batch.ts';
import { readIndexToName } from './image-classifier.ts';
import {
  handlerSection,
  positiveInt,
  resolveImagePreprocessOptions,
  toOriginal,
  type ImageGeometry,
  type ImagePreprocessOptions,
} from './image-preprocess.ts';
import type { Handler, HandlerContext, RequestRow } from './types.ts';

export type BoxFormat = 'xyxy' | 'xywh' | 'cxcywh';

/** object_detector's knobs, from model-config.yaml `handler:`. */
export interface ObjectDetectorOptions extends ImagePreprocessOptions {
  /** `separate`: boxes, scores (and labels) are three outputs; `combined`: one [N,K,4+1+C] output. Default: combined for a one-output model. */
  layout: 'separate' | 'combined';
  /** Output names: separate layout (defaults boxes, scores, labels; labels is optional). */
  boxesOutput: string;
  scoresOutput: string;
  labelsOutput: string | undefined;
  /** Combined layout: the output (default the only one). */
  output: string | undefined;
  /** How a box's 4 numbers read. Default xyxy (separate) or cxcywh (combined, as YOLO). */
  boxFormat: BoxFormat;
  /** Coordinates are fractions (0..1) of the input's width and height instead of pixels. Default false. */
  isNormalized: boolean;
  /** Combined layout: column 4 is an objectness score that multiplies the class scores. Default true. */
  hasObjectness: boolean;
  /** Detections scoring below are dropped. Default 0.5 (TorchServe's). */
  scoreThreshold: number;
  /** Apply non-maximum suppression. Default true for combined, false for separate (such models usually ran it). */
  isNmsApplied: boolean;
  /** NMS: boxes overlapping a better one of the same class by more than this IoU are dropped. Default 0.45. */
  iouThreshold: number;
  /** NMS across classes instead of per class. Default false. */
  isClassAgnostic: boolean;
  /** At most this many detections per image, best first. Default 100. */
  maxDetections: number;
}

function fraction(value: unknown, key: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !(value >= 0 && value <= 1))
    throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(
      `model-config.yaml handler.${key} must be a number from 0 to 1, got ${JSON.stringify(value)}`,
    );
  return value;
}

function flag(value: unknown, key: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean')
    throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(
      `model-config.yaml handler.${key} must be true or false, got ${JSON.stringify(value)}`,
    );
  return value;
}

function name(value: unknown, key: string, fallback: string | undefined): string | undefined {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || value === '')
    throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(
      `model-config.yaml handler.${key} must be the name of a model output, got ${JSON.stringify(value)}`,
    );
  return value;
}

/**
 * Reads object_detector's knobs. Preprocessing defaults: letterbox to the model's input size,
 * pixels scaled to 0..1 without mean/std (TorchServe's detector uses ToTensor only).
 * @throws MARINA_ERR_HANDLER_CONFIG_INVALID naming the bad key.
 */
export function resolveObjectDetectorOptions(
  modelYamlConfig: Record<string, unknown>,
  inputShape: ReadonlyArray<number | string>,
  outputNames: readonly string[],
): ObjectDetectorOptions {
  const h = handlerSection(modelYamlConfig);
  const layout = h.layout ?? (outputNames.length === 1 ? 'combined' : 'separate');
  if (layout !== 'separate' && layout !== 'combined')
    throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(
      `model-config.yaml handler.layout must be separate (boxes, scores, labels outputs) or combined (one [N,K,4+1+classes] output), got ${JSON.stringify(layout)}`,
    );
  const boxFormat = h.box_format ?? (layout === 'combined' ? 'cxcywh' : 'xyxy');
  if (boxFormat !== 'xyxy' && boxFormat !== 'xywh' && boxFormat !== 'cxcywh')
    throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(
      `model-config.yaml handler.box_format must be xyxy, xywh or cxcywh, got ${JSON.stringify(boxFormat)}`,
    );
  const labelsDefault = outputNames.includes('labels') ? 'labels' : undefined;
  const options: ObjectDetectorOptions = {
    ...resolveImagePreprocessOptions(modelYamlConfig, inputShape, {
      resizeMode: 'letterbox',
      mean: [0, 0, 0],
      std: [1, 1, 1],
    }),
    layout,
    boxesOutput: name(h.boxes, 'boxes', 'boxes')!,
    scoresOutput: name(h.scores, 'scores', 'scores')!,
    labelsOutput: name(h.labels, 'labels', labelsDefault),
    output: name(h.output, 'output', outputNames.length === 1 ? outputNames[0] : undefined),
    boxFormat,
    isNormalized: flag(h.boxes_normalized, 'boxes_normalized', false),
    hasObjectness: flag(h.objectness, 'objectness', true),
    scoreThreshold: fraction(
      h.score_threshold ?? h.threshold,
      h.score_threshold !== undefined ? 'score_threshold' : 'threshold',
      0.5,
    ),
    isNmsApplied: flag(h.nms, 'nms', layout === 'combined'),
    iouThreshold: fraction(h.iou_threshold, 'iou_threshold', 0.45),
    isClassAgnostic: flag(h.nms_class_agnostic, 'nms_class_agnostic', false),
    maxDetections: h.max_detections !== undefined ? positiveInt(h.max_detections, 'max_detections') : 100,
  };
  const needed =
    layout === 'separate'
      ? [options.boxesOutput, options.scoresOutput, ...(options.labelsOutput ? [options.labelsOutput] : [])]
      : [options.output];
  for (const [i, wanted] of needed.entries()) {
    if (wanted === undefined)
      throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(
        `object_detector with layout combined reads one output but the model has ${outputNames.length} (${outputNames.join(', ')}); name it with handler.output, or set handler.layout: separate with handler.boxes and handler.scores`,
      );
    if (!outputNames.includes(wanted)) {
      const key = layout === 'combined' ? 'output' : ['boxes', 'scores', 'labels'][i]!;
      throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(
        `object_detector reads output '${wanted}' (handler.${key}) but the model's outputs are ${outputNames.join(', ')}; set handler.${key} in model-config.yaml`,
      );
    }
  }
  return options;
}

/** One detection in the model input's pixels, xyxy. */
export interface Detection {
  box: [number, number, number, number];
  score: number;
  label: number;
}

function toXyxy(a: number, b: number, c: number, d: number, format: BoxFormat): [number, number, number, number] {
  if (format === 'xywh') return [a, b, a + c, b + d];
  if (format === 'cxcywh') return [a - c / 2, b - d / 2, a + c / 2, b + d / 2];
  return [a, b, c, d];
}

function iou(a: Detection['box'], b: Detection['box']): number {
  const w = Math.min(a[2], b[2]) - Math.max(a[0], b[0]);
  const h = Math.min(a[3], b[3]) - Math.max(a[1], b[1]);
  if (w <= 0 || h <= 0) return 0;
  const inter = w * h;
  const union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
  return union > 0 ? inter / union : 0;
}

/** Greedy non-maximum suppression: best first, dropping boxes that overlap a kept one (of the same class unless class-agnostic) above `iouThreshold`. */
export function nonMaxSuppression(
  detections: Detection[],
  options: { iouThreshold: number; isClassAgnostic: boolean },
): Detection[] {
  const sorted = [...detections].sort((a, b) => b.score - a.score);
  const kept: Detection[] = [];
  for (const d of sorted) {
    if (!kept.some((k) => (options.isClassAgnostic || k.label === d.label) && iou(k.box, d.box) > options.iouThreshold))
      kept.push(d);
  }
  return kept;
}

/** Reads one image's detections from the model's outputs (input pixels, before threshold and NMS). */
export function readDetections(outputs: Map<string, ImageOutput>, o: ObjectDetectorOptions): Detection[] {
  const scale = (box: [number, number, number, number]): Detection['box'] =>
    o.isNormalized ? [box[0] * o.width, box[1] * o.height, box[2] * o.width, box[3] * o.height] : box;
  const detections: Detection[] = [];
  if (o.layout === 'combined') {
    const out = outputs.get(o.output!)!;
    const columns = out.dims[out.dims.length - 1]!;
    const count = columns > 0 ? out.data.length / columns : 0;
    const first = o.hasObjectness ? 5 : 4;
    for (let k = 0; k < count; k++) {
      const at = (c: number) => numberAt(out.data, k * columns + c);
      let label = 0;
      let best = columns > first ? -Infinity : 1;
      for (let c = first; c < columns; c++) {
        if (at(c) > best) {
          best = at(c);
          label = c - first;
        }
      }
      const score = (o.hasObjectness ? at(4) : 1) * best;
      detections.push({ box: scale(toXyxy(at(0), at(1), at(2), at(3), o.boxFormat)), score, label });
    }
    return detections;
  }
  const boxes = outputs.get(o.boxesOutput)!;
  const scores = outputs.get(o.scoresOutput)!;
  const labels = o.labelsOutput ? outputs.get(o.labelsOutput) : undefined;
  const count = boxes.data.length / 4;
  const perBox = count > 0 ? scores.data.length / count : 0;
  if (!Number.isInteger(count) || !Number.isInteger(perBox) || perBox < 1) {
    throw createHandlerError.MARINA_ERR_MODEL_OUTPUT_UNEXPECTED(
      `object_detector read ${boxes.data.length / 4} boxes from '${o.boxesOutput}' [${boxes.dims.join(', ')}] and ${scores.data.length} scores from '${o.scoresOutput}' [${scores.dims.join(', ')}]; boxes must be [N,K,4] and scores [N,K] or [N,K,classes]`,
    );
  }
  for (let k = 0; k < count; k++) {
    let score = -Infinity;
    let label = 0;
    for (let c = 0; c < perBox; c++) {
      const v = numberAt(scores.data, k * perBox + c);
      if (v > score) {
        score = v;
        label = c;
      }
    }
    if (labels) label = numberAt(labels.data, k);
    const at = (c: number) => numberAt(boxes.data, k * 4 + c);
    detections.push({ box: scale(toXyxy(at(0), at(1), at(2), at(3), o.boxFormat)), score, label });
  }
  return detections;
}

/** Threshold, NMS, the best `maxDetections`, and boxes mapped back to the original image (clipped to it). */
export function finishDetections(
  detections: Detection[],
  geometry: ImageGeometry,
  o: ObjectDetectorOptions,
): Detection[] {
  let kept = detections.filter((d) => d.score >= o.scoreThreshold);
  kept = o.isNmsApplied ? nonMaxSuppression(kept, o) : kept.sort((a, b) => b.score - a.score);
  const clip = (v: number, max: number) => Math.min(Math.max(v, 0), max);
  return kept.slice(0, o.maxDetections).map((d) => {
    const [x1, y1] = toOriginal(geometry, d.box[0], d.box[1]);
    const [x2, y2] = toOriginal(geometry, d.box[2], d.box[3]);
    return {
      ...d,
      box: [
        clip(x1, geometry.originalWidth),
        clip(y1, geometry.originalHeight),
        clip(x2, geometry.originalWidth),
        clip(y2, geometry.originalHeight),
      ],
    };
  });
}

interface Inferred {
  decoded: DecodedImages;
  outputs: Map<string, ImageOutput[]>;
}

/**
 * TorchServe's object_detector for ONNX detectors: per image, a list of
 * `{"<label>": [x1, y1, x2, y2], "score": s}` (TorchServe's shape), best first, boxes in the
 * original image's pixels; labels from index_to_name.json when the archive has one.
 */
export function createObjectDetector(): Handler {
  let runner: ImageModelRunner;
  let options: ObjectDetectorOptions;
  let outputNames: string[];
  let labels: Map<number, string> | undefined;
  /** The runner prepare made from the graph, before the session (undefined: initialize makes it). */
  let prepared: ImageModelRunner | undefined;

  /** What the handler derives from the model's inputs and outputs (prepare's graph, or the session's). */
  async function setUp(r: ImageModelRunner, context: HandlerContext): Promise<void> {
    options = resolveObjectDetectorOptions(context.modelYamlConfig, r.inputShape, r.outputNames);
    r.options = options;
    outputNames =
      options.layout === 'combined'
        ? [options.output!]
        : [options.boxesOutput, options.scoresOutput, ...(options.labelsOutput ? [options.labelsOutput] : [])];
    labels = await readIndexToName(context.modelDir);
  }

  return {
    isPipelineSafe: true,

    async prepare(context: HandlerContext) {
      prepared = await prepareImageModelRunner(context, 'object_detector', (r) => setUp(r, context));
      if (prepared) runner = prepared;
      return prepared !== undefined;
    },

    async initialize(context: HandlerContext) {
      runner = await createImageModelRunner(context, 'object_detector', prepared, (r) => setUp(r, context));
    },

    preprocess(rows: RequestRow[]): Promise<DecodedImages> {
      return runner.decode(rows, 'object_detector');
    },

    async inference(input: unknown): Promise<Inferred> {
      const decoded = input as DecodedImages;
      return { decoded, outputs: await runner.run(decoded, outputNames) };
    },

    postprocess(output: unknown): unknown[] {
      const { decoded, outputs } = output as Inferred;
      const results: unknown[] = decoded.errors.map((e) => e as MarinaError);
      decoded.good.forEach((row, n) => {
        try {
          const mine = new Map(outputNames.map((name) => [name, outputs.get(name)![n]!]));
          const detections = finishDetections(readDetections(mine, options), decoded.geometry[row]!, options);
          results[row] = detections.map((d) => ({ [labels?.get(d.label) ?? String(d.label)]: d.box, score: d.score }));
        } catch (error) {
          results[row] = error;
        }
      });
      return results;
    },
  };
}

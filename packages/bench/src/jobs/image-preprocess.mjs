// Plain JavaScript (no tsx) so that a decentralized job pays only what a real script would.
// Mirrors the image_classifier handler: shorter side to 256, centre crop 224, ImageNet mean/std, NCHW float32.
import sharp from 'sharp';

const MEAN = [0.485, 0.456, 0.406];
const STD = [0.229, 0.224, 0.225];

/**
 * Decodes a JPEG and returns normalised NCHW float32 pixels for one image.
 * @param {Buffer} jpeg
 * @param {{ size?: number, resizeTo?: number, out?: Float32Array }} [options]
 * @returns {Promise<Float32Array>}
 */
export async function preprocessImage(jpeg, options = {}) {
  const size = options.size ?? 224;
  const resizeTo = options.resizeTo ?? Math.round((size * 256) / 224);
  const { width = size, height = size } = await sharp(jpeg).metadata();
  const scale = resizeTo / Math.min(width, height);
  const resizedWidth = Math.max(size, Math.round(width * scale));
  const resizedHeight = Math.max(size, Math.round(height * scale));
  const rgb = await sharp(jpeg)
    .resize(resizedWidth, resizedHeight, { fit: 'fill' })
    .extract({
      left: Math.floor((resizedWidth - size) / 2),
      top: Math.floor((resizedHeight - size) / 2),
      width: size,
      height: size,
    })
    .removeAlpha()
    .toColourspace('srgb')
    .raw()
    .toBuffer();
  const plane = size * size;
  const out = options.out ?? new Float32Array(3 * plane);
  for (let i = 0; i < plane; i++) {
    for (let c = 0; c < 3; c++) out[c * plane + i] = (rgb[i * 3 + c] / 255 - MEAN[c]) / STD[c];
  }
  return out;
}

/** Spatial size the model expects (its input's last dimension), 224 when dynamic. */
export function inputSizeOf(session) {
  const meta = session.inputMetadata?.[0];
  const dim = meta && Array.isArray(meta.shape) ? meta.shape[meta.shape.length - 1] : undefined;
  return typeof dim === 'number' && dim > 0 ? dim : 224;
}

import sharp from 'sharp';
import { createPrng } from './prng.ts';
import { integerOption, seedOption } from './validate-options.ts';

const WORDS = [
  'invoice',
  'total',
  'marina',
  'quantise',
  'model',
  'archive',
  'payment',
  'due',
  'date',
  '2026',
  'amount',
  'EUR',
  'street',
  'order',
  'number',
  'Nr. 4711',
  'VAT',
  'delivery',
];

/**
 * A JPEG (quality 90) of a generated text document: lines of dark words on a light page,
 * with font size, ink, margins and paper tint varied by `seed`; what a text detector serves.
 * Text is sized to the page (`linesPerPage`, default 9; 1.3 gives one text line, as an OCR
 * classifier sees it). Deterministic for a seed. Default 320×320.
 *
 * @throws MARINA_ERR_MODEL_ZOO_INVALID_OPTION for a bad size.
 */
export async function renderDocumentJpeg(
  options: { seed?: number; width?: number; height?: number; linesPerPage?: number } = {},
): Promise<Buffer> {
  const width = integerOption('width', options.width, 320, 32, 4096);
  const height = integerOption('height', options.height, 320, 32, 4096);
  const prng = createPrng(seedOption(options.seed, 7));
  const r = (): number => prng.next();
  const lineHeight = height / (options.linesPerPage ?? 9);
  const lines: string[] = [];
  for (let y = lineHeight * 0.85; y < height - lineHeight * 0.1; y += lineHeight * (0.8 + r() * 0.5)) {
    const ink = (): number => Math.floor(r() * 70);
    const fontSize = Math.round(lineHeight * (0.45 + r() * 0.3));
    const words = Array.from({ length: 2 + Math.floor(r() * 4) }, () => WORDS[Math.floor(r() * WORDS.length)]);
    lines.push(
      `<text x="${Math.round(width * (0.03 + r() * 0.15))}" y="${Math.round(y)}" font-size="${fontSize}" font-weight="${r() < 0.3 ? 'bold' : 'normal'}" fill="rgb(${ink()},${ink()},${ink()})">${words.join(' ')}</text>`,
    );
  }
  const paper = `rgb(${230 + Math.floor(r() * 25)},${230 + Math.floor(r() * 25)},${220 + Math.floor(r() * 35)})`;
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}"><rect width="${width}" height="${height}" fill="${paper}"/>${lines.join('')}</svg>`;
  return sharp(Buffer.from(svg)).jpeg({ quality: 90 }).toBuffer();
}

import { describe, expect, it } from 'vitest';
import { countResnetFoldedParameters, countResnetMacs, countResnetParameters } from '../src/index.ts';

describe('ResNet counters', () => {
  it("counts torchvision's published parameter numbers", () => {
    expect(countResnetParameters(18)).toBe(11_689_512);
    expect(countResnetParameters(50)).toBe(25_557_032);
    expect(countResnetParameters(152)).toBe(60_192_808);
  });

  it('counts one value fewer per batch-norm channel once batch norm is folded into conv biases', () => {
    expect(countResnetFoldedParameters(18)).toBe(11_689_512 - 4_800);
    expect(countResnetFoldedParameters(152)).toBe(60_117_096);
    // ~230 MB of float32 weights for ResNet-152
    expect(countResnetFoldedParameters(152) * 4).toBeGreaterThan(225e6);
    expect(countResnetFoldedParameters(152) * 4).toBeLessThan(245e6);
  });

  it('scales the classifier with numClasses', () => {
    expect(countResnetParameters(50, 10)).toBe(25_557_032 - 2048 * 990 - 990);
  });

  it('counts about 11.5 GMACs per 224x224 image for ResNet-152 and fewer for smaller inputs', () => {
    expect(countResnetMacs(152)).toBeGreaterThan(11.5e9 * 0.97);
    expect(countResnetMacs(152)).toBeLessThan(11.5e9 * 1.03);
    expect(countResnetMacs(18)).toBeCloseTo(1.814e9, -7);
    expect(countResnetMacs(50, 112)).toBeLessThan(countResnetMacs(50) / 3);
  });

  it('rejects an unsupported depth with a coded error', () => {
    expect(() => countResnetParameters(34 as 18)).toThrow(
      expect.objectContaining({ code: 'MARINA_ERR_MODEL_ZOO_INVALID_OPTION' }),
    );
  });
});

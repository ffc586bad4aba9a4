import { describe, expect, it } from 'vitest';
import { closestName, didYouMean, editDistance } from '../src/index.ts';

describe('closestName', () => {
  it('finds the closest candidate within a typo distance', () => {
    expect(closestName('resnet152', ['resnet-18', 'resnet-152', 'tiny'])).toBe('resnet-152');
    expect(closestName('image_clasifier', ['image_classifier', 'tensor', 'base_handler'])).toBe('image_classifier');
    expect(closestName('Tensor', ['image_classifier', 'tensor'])).toBe('tensor');
  });

  it('suggests nothing for a far name, an exact name or no candidates', () => {
    expect(closestName('bert', ['resnet-18', 'resnet-152'])).toBeUndefined();
    expect(closestName('tensor', ['tensor', 'tensorx'])).toBeUndefined();
    expect(closestName('x', [])).toBeUndefined();
  });

  it('phrases the suggestion, or says nothing', () => {
    expect(didYouMean('resnet-125', ['resnet-152'])).toBe("; did you mean 'resnet-152'?");
    expect(didYouMean('bert', ['resnet-152'])).toBe('');
  });

  it('counts insertions, deletions and substitutions', () => {
    expect(editDistance('kitten', 'sitting')).toBe(3);
    expect(editDistance('', 'abc')).toBe(3);
    expect(editDistance('same', 'same')).toBe(0);
  });
});

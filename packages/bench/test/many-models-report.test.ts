import { describe, expect, it } from 'vitest';
import type { ManyModelsSummary, ZipfPhase } from '../src/bench-result.ts';
import {
  busyModelsMean,
  formatManyModelsSection,
  manyModelsPlan,
  popularityGroups,
} from '../src/experiments/many-models.ts';

const phase = (label: string, extra: Partial<ZipfPhase> = {}): ZipfPhase => ({
  label,
  requests: 600,
  errors: 0,
  throughputPerSec: 30,
  p50Ms: 200,
  p99Ms: 900,
  waitedForLoad: 0,
  waitedP50Ms: Number.NaN,
  waitedP99Ms: Number.NaN,
  warmP50Ms: 200,
  peakPssMb: 2000,
  ...extra,
});

const summary = (coldAlone?: ManyModelsSummary['coldAlone']): ManyModelsSummary => ({
  plan: manyModelsPlan('full'),
  modelSizeMb: 102,
  allResidentSumMb: 1700,
  budgetMb: 640,
  hotSetModels: 3,
  floorCreateMs: 10,
  floorRunMs: 40,
  phases: {
    allResidentZipf: phase('all 12 resident, Zipf over all'),
    budgetZipf: phase('budget 640 MB, Zipf over all', {
      waitedForLoad: 480,
      waitedP50Ms: 3000,
      waitedP99Ms: 9000,
      peakPssMb: 770,
    }),
    allResidentHot: phase('all resident, Zipf over the hot set (3)'),
    budgetHot: phase('budget, Zipf over the hot set (3)', { throughputPerSec: 33, peakPssMb: 700 }),
  },
  baselinePssMb: 300,
  serverAlonePssMb: 110,
  serverLoads: 200,
  serverLoadMeanMs: 2500,
  ...(coldAlone ? { coldAlone } : {}),
});

const coldLine = (lines: string[]) => lines.find((l) => l.startsWith('- Cold requests one at a time'));

describe('many-models report', () => {
  it('judges cold requests sent one at a time against 1.5 × the idle floor (session + one run)', () => {
    // Floor 10 + 40 = 50 ms: 75 ms is the most that meets the goal.
    const met = coldLine(
      formatManyModelsSection(summary({ waited: 24, sent: 24, p50Ms: 75, p99Ms: 90, queueP50Ms: 30 })),
    );
    expect(met).toContain('24 of 24 waited for a load');
    expect(met).toContain('1.50×');
    expect(met).toContain('**met**');
    const missed = coldLine(
      formatManyModelsSection(summary({ waited: 22, sent: 24, p50Ms: 250, p99Ms: 400, queueP50Ms: 160 })),
    );
    expect(missed).toContain('5.00×');
    expect(missed).toContain('**missed**');
    expect(missed).toContain('p50 160 ms');
  });

  it('says how long the server was quiet before each cold request, and reports the back-to-back ones beside, without a verdict', () => {
    const lines = formatManyModelsSection({
      ...summary({ waited: 24, sent: 24, p50Ms: 100, p99Ms: 130, queueP50Ms: 40, pauseMs: 500 }),
      coldBackToBack: { waited: 23, sent: 24, p50Ms: 190, p99Ms: 260, queueP50Ms: 110, pauseMs: 0 },
    });
    expect(coldLine(lines)).toContain('sent after 500 ms of quiet');
    // 100 ÷ (10 + 40)
    expect(coldLine(lines)).toContain('2.00×');
    const backToBack = lines.find((l) => l.startsWith('- The same cold requests back to back'));
    expect(backToBack).toContain('23 of 24 waited for a load');
    expect(backToBack).toContain('3.80× the floor');
    expect(backToBack).not.toMatch(/met|missed/);
  });

  it("compares the requests that waited for a load with the same phase's requests that did not, beside the goal's verdicts, not instead of them", () => {
    const base = summary();
    const lines = formatManyModelsSection({
      ...base,
      phases: { ...base.phases, budgetZipf: { ...base.phases.budgetZipf, warmP50Ms: 2490 } },
    });
    const line = lines.find((l) => l.startsWith('- Requests that waited for a load'));
    // Against the idle floor: 3000 ÷ (10 + 40) = 60×; the all-resident p50: 3000 ÷ (10 + 200) = 14.29×.
    expect(line).toContain('60.00× (goal ≤ 1.5×): **missed**');
    expect(line).toContain('14.29× (goal ≤ 1.5×): **missed**');
    // The same phase's warm p50: 3000 ÷ (10 + 2490) = 1.20×, with no verdict of its own.
    expect(line).toMatch(/10 \+ 2490 = 2500 ms, 1\.20×\.$/);
    expect(line?.match(/\*\*(met|missed)\*\*/g)).toHaveLength(2);
  });

  it('leaves the line out for results measured before it existed', () => {
    expect(coldLine(formatManyModelsSection(summary()))).toBeUndefined();
  });

  it('takes the budget divisor asked for (--budget-divisor, default 3) and names it in the report', () => {
    expect(manyModelsPlan('full').budgetDivisor).toBe(3);
    const plan = manyModelsPlan('full', 1.5);
    expect(plan.budgetDivisor).toBe(1.5);
    const lines = formatManyModelsSection({ ...summary(), plan });
    expect(lines[2]).toContain("less the server alone's (110 MB), ÷ 1.5: 640 MB");
    expect(lines.find((l) => l.startsWith('- Peak PSS'))).toContain('÷ 1.5)');
  });

  it('splits a phase by popularity: the most asked-for model, the next two, the rest', () => {
    // Model 0 answered slowly, the rarely used ones at once; two of model 7's requests waited for a load.
    const answered = [
      ...[900, 1000, 1100].map((ms) => ({ model: 0, ms, hasWaited: false })),
      { model: 1, ms: 400, hasWaited: false },
      { model: 2, ms: 500, hasWaited: false },
      { model: 7, ms: 150, hasWaited: true },
      { model: 7, ms: 250, hasWaited: true },
      { model: 11, ms: 200, hasWaited: false },
    ];
    const groups = popularityGroups(answered, 12);
    expect(groups.map((g) => [g.firstRank, g.lastRank, g.requests, g.waitedForLoad])).toEqual([
      [1, 1, 3, 0],
      [2, 3, 2, 0],
      [4, 12, 3, 2],
    ]);
    expect(groups[0]?.p50Ms).toBe(1000);
    expect(groups[2]?.p50Ms).toBe(200);
    // A hot phase over three models has no third group.
    expect(
      popularityGroups(
        answered.filter((r) => r.model < 3),
        3,
      ),
    ).toHaveLength(2);
  });

  it("reports where the Zipf phases' latency sits, with the mean from Little's law beside the measured one", () => {
    const byPopularity = popularityGroups(
      [
        { model: 0, ms: 2000, hasWaited: false },
        { model: 5, ms: 200, hasWaited: false },
      ],
      12,
    );
    const base = summary();
    const lines = formatManyModelsSection({
      ...base,
      phases: {
        ...base.phases,
        allResidentZipf: { ...base.phases.allResidentZipf, meanMs: 1100, byPopularity },
        budgetZipf: { ...base.phases.budgetZipf, meanMs: 1050, byPopularity },
      },
    });
    const line = lines.find((l) => l.startsWith("- Where the Zipf phases' latency sits"));
    // 32 clients ÷ 30 req/s = 1067 ms.
    expect(line).toContain('all resident: mean 1100 ms (32 clients ÷ 30.0 req/s = 1067 ms)');
    expect(line).toContain('model 1 1 requests (0 waited for a load), p50 2000 / p99 2000 ms');
    expect(line).toContain('models 2–3 0 requests');
    expect(line).toContain('. Under the budget: mean 1050 ms');
    expect(coldLine(lines)).toBeUndefined();
    expect(formatManyModelsSection(summary()).some((l) => l.startsWith('- Where the Zipf'))).toBe(false);
  });
  it('averages the models with a request outstanding over the phase, a model once however many of its requests are out', () => {
    // 0–100 ms: model 0 alone (1); 100–200: models 0 and 3 (2), model 0 with two requests out;
    // 200–300: model 3 (1); 300–400: nothing. Counting requests instead of models would give 1.075.
    const requests = [
      { model: 0, startMs: 0, endMs: 100 },
      { model: 0, startMs: 100, endMs: 200 },
      { model: 0, startMs: 150, endMs: 180 },
      { model: 3, startMs: 100, endMs: 300 },
    ];
    // (100 × 1 + 100 × 2 + 100 × 1) ÷ 400 = 1.
    expect(busyModelsMean(requests, 400)).toBeCloseTo(1, 10);
    expect(busyModelsMean(requests, 300)).toBeCloseTo(4 / 3, 10);
    // Every model busy the whole time: their count.
    expect(
      busyModelsMean(
        Array.from({ length: 12 }, (_, model) => ({ model, startMs: 0, endMs: 50 })),
        50,
      ),
    ).toBeCloseTo(12, 10);
    expect(busyModelsMean([], 0)).toBeNaN();
  });

  it('says how many models the Zipf traffic keeps busy against how many the budget holds', () => {
    const base = summary();
    const lines = formatManyModelsSection({
      ...base,
      phases: {
        ...base.phases,
        allResidentZipf: { ...base.phases.allResidentZipf, busyModelsMean: 8.94 },
        budgetZipf: { ...base.phases.budgetZipf, busyModelsMean: 9.51 },
      },
    });
    const line = lines.find((l) => l.startsWith('- Models busy at once'));
    expect(line).toContain('all resident 8.9 of 12; under the budget 9.5,');
    expect(line).toContain('The budget holds about 4.0 at the models');
    expect(formatManyModelsSection(summary()).some((l) => l.startsWith('- Models busy at once'))).toBe(false);
  });
});

#!/usr/bin/env node
// `marina-models`: @marina/model-zoo bin `marina-models`, run in this process.
import { readFileSync } from 'node:fs';

const packageUrl = import.meta.resolve('@marina/model-zoo/package.json');
const { bin } = JSON.parse(readFileSync(new URL(packageUrl), 'utf8'));
await import(new URL(bin['marina-models'], packageUrl).href);

#!/usr/bin/env node
// `model-archiver`: @marina/model-archiver bin `model-archiver`, run in this process.
import { readFileSync } from 'node:fs';

const packageUrl = import.meta.resolve('@marina/model-archiver/package.json');
const { bin } = JSON.parse(readFileSync(new URL(packageUrl), 'utf8'));
await import(new URL(bin['model-archiver'], packageUrl).href);

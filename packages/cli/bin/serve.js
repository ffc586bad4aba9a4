#!/usr/bin/env node
// `serve`: @marina/serve bin `serve`, run in this process.
import { readFileSync } from 'node:fs';

const packageUrl = import.meta.resolve('@marina/serve/package.json');
const { bin } = JSON.parse(readFileSync(new URL(packageUrl), 'utf8'));
await import(new URL(bin.serve, packageUrl).href);

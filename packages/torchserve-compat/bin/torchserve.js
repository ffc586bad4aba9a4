#!/usr/bin/env node
// `torchserve`: Marina's `serve` under TorchServe's command name, run in this process, so a TorchServe
// user's scripts run with only a PATH change.
import { readFileSync } from 'node:fs';

const packageUrl = import.meta.resolve('@marina/cli/package.json');
const { bin } = JSON.parse(readFileSync(new URL(packageUrl), 'utf8'));
await import(new URL(bin.serve, packageUrl).href);

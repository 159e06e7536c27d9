#!/usr/bin/env node
// Runs the TypeScript CLI through tsx, so the checkout needs no build step.
import { register } from 'tsx/esm/api';

register();
// The client commands (src/client/cli.ts, isClientCommand) load none of the server's modules: they start fast.
const [command, ...rest] = process.argv.slice(2);
if (
  ['login', 'logout', 'whoami', 'exec', 'activity', 'sandbox', 'template', 'run', 'mcp'].includes(command) ||
  (command === 'threads' && rest[0] === 'tail')
) {
  const { runClient } = await import('../src/client/main.ts');
  await runClient(command, rest);
} else {
  await import('../src/main.ts');
}

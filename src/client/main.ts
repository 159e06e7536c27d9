/**
 * Entry of the client commands (bin/hangar.js loads it for them instead of src/main.ts): it imports nothing of the
 * server, so `hangar exec` starts in a fraction of the time the server's modules take to load.
 */
import { ClientCliError, clientCli } from './cli.js';

/** One line of standard input (empty when it is closed at once). */
async function readLine(): Promise<string> {
  let text = '';
  for await (const chunk of process.stdin) {
    text += chunk;
    if (text.includes('\n')) break;
  }
  return text.split('\n')[0] ?? '';
}

/** Runs one client command and sets the exit code (2 and one line on stderr for a usage or API error). */
export async function runClient(command: string, argv: string[]): Promise<void> {
  try {
    if (command === 'mcp') {
      // Standard output carries MCP frames only (src/client/mcp.ts); the SDK is loaded for this command alone.
      const { runMcpBridge } = await import('./mcp.js');
      process.exitCode = await runMcpBridge(argv, process.env, (t) => console.error(t));
      return;
    }
    if (command === 'sandbox' && argv[0] === 'shell') {
      // An interactive terminal into a sandbox (src/client/shell.ts).
      const { runShell } = await import('./shell.js');
      process.exitCode = await runShell(argv.slice(1), process.env, (t) => console.error(t));
      return;
    }
    process.exitCode = await clientCli(command, argv, { env: process.env, out: (t) => console.log(t), err: (t) => console.error(t), readLine });
  } catch (err) {
    if (err instanceof ClientCliError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      console.error(`hangar: ${(err as Error).message}`);
      process.exitCode = err instanceof ClientCliError ? err.exitCode : 2;
      return;
    }
    throw err;
  }
}

/** What startRun, its turn loop and its tool step share: how a run writes frames and how it is cancelled. */
import type { DurableFrame, DurableInput, TransientFrame, TransientOrigin } from '../threads/index.js';

/** Why a run stopped early; a caller that aborts a run with one (e.g. a deployment's timeout) gives its reason. */
export class CancelledError extends Error {
  constructor(message = 'the run was cancelled') {
    super(message);
    this.name = 'CancelledError';
  }
}

/** How a run writes into its thread: durable frames (appendDurable), live frames (the thread's transient publisher), and their origin. */
export interface RunIo {
  durable: (frames: DurableInput[]) => Promise<DurableFrame[]>;
  live: (frame: TransientFrame) => Promise<void>;
  origin: () => TransientOrigin;
  /** Told each tool result (a context session keeps them when asked). */
  onToolResult?: (r: { toolCallId: string; name: string; output: string; isError: boolean }) => void;
}

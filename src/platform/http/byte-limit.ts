import { Transform } from 'node:stream';
import { errors } from './errors.js';

/**
 * A pass-through that fails once more than `limit` bytes have gone through it: with `tooLarge()`, by default
 * 413 `payload_too_large`. Nothing past the limit is passed on. `bytes` counts what was seen.
 */
export class ByteLimit extends Transform {
  bytes = 0;
  /** True once the limit was passed (the stream then fails with `tooLarge()`). */
  exceeded = false;

  constructor(
    readonly limit: number,
    private readonly tooLarge: () => Error = () => errors.tooLarge(`the body is larger than the limit of ${limit} bytes`),
  ) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null, data?: Buffer) => void): void {
    this.bytes += chunk.length;
    if (this.bytes > this.limit) {
      this.exceeded = true;
      done(this.tooLarge());
      return;
    }
    done(null, chunk);
  }
}

/** Refuses a declared Content-Length over `limit` with 413 `payload_too_large` before any byte is read. */
export function refuseDeclaredLength(declared: number | undefined, limit: number, message: string): void {
  if (declared !== undefined && declared > limit) throw errors.tooLarge(message);
}

// Types for plinth_sdk.js, for TypeScript users and editors. The SDK itself
// is plain JavaScript with JSDoc; `plinth pack` builds JavaScript only, so
// compile TypeScript to `tool.js` first (e.g. `tsc --module es2022`).

/** Optional details of a tool error (the WIT `tool-error` record's other fields). */
export interface ToolErrorDetails {
  /** Detail for the developer of the calling agent (not for the LLM). */
  developerMessage?: string;
  /** Whether the same call may succeed if tried again later. */
  canRetry?: boolean;
  /** How long to wait before trying again, in milliseconds (implies canRetry). */
  retryAfterMs?: number;
  /** Extra text the executor may add to the LLM's prompt. */
  additionalPromptContent?: string;
}

/** A failure the tool reports to its caller, shaped for an LLM: A2T 422, or 503 with Retry-After when it can be retried. */
export class ToolError extends Error {
  constructor(message: string, details?: ToolErrorDetails);
  developerMessage: string | undefined;
  canRetry: boolean;
  retryAfterMs: number | undefined;
  additionalPromptContent: string | undefined;
  /** A temporary failure: the same call may succeed after `afterMs`. */
  static retry(
    message: string,
    afterMs: number,
    details?: Pick<ToolErrorDetails, 'developerMessage' | 'additionalPromptContent'>,
  ): ToolError;
}

/**
 * Wraps an export (`call`, `describe`): a thrown ToolError becomes `err(tool-error)`;
 * any other exception is logged with its stack and ends the call as a trap.
 */
export function tool<I, O>(fn: (input: I) => O | Promise<O>): (input: I) => Promise<O>;

/** What one call will do, for the human who confirms it (the return value of `describe`). */
export class CallDescription {
  constructor(summary?: string);
  summary: string;
  facts: { name: string; value: string }[];
  /** Adds a named fact, e.g. `('Total price', '360 USD')`; returns this. */
  fact(name: string, value: string): CallDescription;
}

/** Per-tool configuration set by the operator (`wasi:config/store`). */
export const config: {
  /** The value of `key`, or undefined when it is not set. */
  get(key: string): string | undefined;
  /** The value of `key`; a non-retryable ToolError when it is not set. */
  require(key: string): string;
};

/** Secrets the operator stores for the tool (declared under `secrets` in plinth.toml). */
export const secrets: {
  get(id: string): string | undefined;
  require(id: string): string;
};

/** Log lines into the host's structured logs. */
export const log: {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
};

/** A response whose body has been read in full. */
export class HttpResponse {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
  readonly url: string;
  /** Whether the status is 2xx. */
  readonly ok: boolean;
  /** The body parsed as JSON; a non-retryable ToolError when it is not JSON. */
  json(): any;
}

export interface HttpOptions {
  headers?: Record<string, string>;
}

/**
 * Outbound HTTP over wasi:http/outgoing-handler, limited to the hosts plinth.toml declares.
 * A request that cannot be made becomes a retryable ToolError; every HTTP status is returned.
 */
export const http: {
  request(
    method: string,
    url: string,
    options?: HttpOptions & { json?: unknown; body?: string | Uint8Array },
  ): Promise<HttpResponse>;
  get(url: string, options?: HttpOptions): Promise<HttpResponse>;
  post(url: string, json: unknown, options?: HttpOptions): Promise<HttpResponse>;
};

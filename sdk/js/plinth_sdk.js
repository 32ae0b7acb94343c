// Write Plinth tools in JavaScript with little ceremony.
//
// A tool is `tool.js` exporting the functions of its WIT world (`call`, and
// optionally `describe`), built by `plinth pack` with componentize-js. Its
// world must `include plinth:tool/imports@0.1.0;` (log, secrets, config) and,
// to reach a backend, `import wasi:http/outgoing-handler@0.2.12;`:
//
//   import { ToolError, config, http, tool } from './plinth_sdk.js';
//
//   export const call = tool(async ({ city, days }) => {
//     const base = config.require('backend-url');
//     const places = (await http.get(`${base}/v1/geocode?name=${encodeURIComponent(city)}`)).json();
//     if (places.results.length === 0) {
//       throw new ToolError(`no city called \`${city}\` is known`, {
//         additionalPromptContent: 'Ask the user to check the spelling.',
//       });
//     }
//     return { ... };   // the world's `output` record, fields in camelCase
//   });
//
// How componentize-js (0.23) maps JavaScript onto the component:
// - An export may be `async`: it stays synchronous for the host, and the
//   engine runs its event loop until the promise settles. That is what lets
//   `fetch` (and so `http` below) work inside a call.
// - Returning a value is `ok(output)`; throwing (or rejecting with) an object
//   is `err(tool-error)`, its fields read from the thrown object's properties
//   (`ToolError` has exactly those). By itself componentize-js does this for
//   every `Error`, bugs included; `tool()` keeps `err` for `ToolError` and
//   turns any other exception into a trap, as a panic is in Rust.
// - WIT names are camelCase in JavaScript (`developer-message` →
//   `developerMessage`), enum cases their WIT strings (`'celsius'`),
//   `option<T>` the value or `undefined`, `list<T>` an array.

import { write as writeLog } from 'plinth:tool/log@0.1.0';
import { get as getSecret } from 'plinth:tool/secrets@0.1.0';
import { get as getConfig } from 'wasi:config/store@0.2.0-rc.1';

/**
 * A failure the tool reports to its caller, shaped for an LLM. Throw it from
 * `call` (or `describe`); the host answers A2T `422`, or `503` with
 * `Retry-After` when `canRetry` is set.
 */
export class ToolError extends Error {
  /**
   * @param {string} message What went wrong, in words the LLM can act on.
   * @param {object} [details]
   * @param {string} [details.developerMessage] Detail for the developer of the calling agent (not for the LLM).
   * @param {boolean} [details.canRetry] Whether the same call may succeed if tried again later.
   * @param {number} [details.retryAfterMs] How long to wait before trying again, in milliseconds.
   * @param {string} [details.additionalPromptContent] Extra text the executor may add to the LLM's prompt.
   */
  constructor(message, { developerMessage, canRetry = false, retryAfterMs, additionalPromptContent } = {}) {
    super(message);
    this.name = 'ToolError';
    /** @type {string | undefined} */
    this.developerMessage = developerMessage;
    /** @type {boolean} */
    this.canRetry = canRetry || retryAfterMs !== undefined;
    /** @type {number | undefined} */
    this.retryAfterMs = retryAfterMs === undefined ? undefined : Math.max(0, Math.round(retryAfterMs));
    /** @type {string | undefined} */
    this.additionalPromptContent = additionalPromptContent;
  }

  /**
   * A temporary failure: the same call may succeed after `afterMs`.
   * @param {string} message
   * @param {number} afterMs
   * @param {{developerMessage?: string, additionalPromptContent?: string}} [details]
   * @returns {ToolError}
   */
  static retry(message, afterMs, details = {}) {
    return new ToolError(message, { ...details, canRetry: true, retryAfterMs: afterMs });
  }
}

/**
 * Wraps a tool's export (`call`, `describe`): a `ToolError` it throws becomes
 * `err(tool-error)`; any other exception is a bug, logged with its stack to
 * the tool's stderr (the host's logs) and ending the call as a trap: the
 * caller gets the host's `tool_trapped`, never the exception's text.
 *
 * @template I, O
 * @param {(input: I) => O | Promise<O>} fn
 * @returns {(input: I) => Promise<O>}
 */
export function tool(fn) {
  return async function (input) {
    try {
      return await fn(input);
    } catch (e) {
      if (e instanceof ToolError) throw e;
      // (SpiderMonkey's `stack` lists the frames only.)
      console.error(`the tool failed: ${e instanceof Error ? `${e.name}: ${e.message}\n${e.stack}` : String(e)}`);
      // No tool-error can be read from null: componentize-js's bindings
      // throw out of the export, and the engine aborts the call.
      throw null;
    }
  };
}

/**
 * What one call will do, in words for the human who confirms it: the return
 * value of an optional `describe` export (see wit/tool.wit).
 *
 *   export function describe(input) {
 *     return new CallDescription(`Books flight ${input.flightNumber}.`).fact('Total price', '360 USD');
 *   }
 */
export class CallDescription {
  /** @param {string} summary One or two sentences about this call; may be empty. */
  constructor(summary = '') {
    /** @type {string} */
    this.summary = summary;
    /** @type {{name: string, value: string}[]} */
    this.facts = [];
  }

  /**
   * Adds a named fact the human should see before deciding, e.g. `('Total price', '360 USD')`.
   * @param {string} name
   * @param {string} value
   * @returns {CallDescription} this, to chain
   */
  fact(name, value) {
    this.facts.push({ name: String(name), value: String(value) });
    return this;
  }
}

/** Per-tool configuration set by the operator (`wasi:config/store`). */
export const config = {
  /**
   * The value of `key`, or `undefined` when the operator did not set it.
   * @param {string} key
   * @returns {string | undefined}
   */
  get(key) {
    try {
      return getConfig(key) ?? undefined;
    } catch (e) {
      throw ToolError.retry("the tool's configuration could not be read", 1000, {
        developerMessage: describeError(e),
      });
    }
  },

  /**
   * The value of `key`; a clear, non-retryable ToolError when it is missing.
   * @param {string} key
   * @returns {string}
   */
  require(key) {
    const value = config.get(key);
    if (value === undefined) {
      throw new ToolError('the tool is not configured on this server', {
        developerMessage: `config key \`${key}\` is not set`,
      });
    }
    return value;
  },
};

/** Secrets the operator stores for the tool (declare their ids under `secrets` in plinth.toml). */
export const secrets = {
  /**
   * The secret's value, or `undefined` when it is not declared or not set.
   * @param {string} id
   * @returns {string | undefined}
   */
  get(id) {
    return getSecret(id) ?? undefined;
  },

  /**
   * The secret's value; a clear, non-retryable ToolError when it is missing.
   * @param {string} id
   * @returns {string}
   */
  require(id) {
    const value = secrets.get(id);
    if (value === undefined) {
      throw new ToolError('the tool is not configured on this server', {
        developerMessage: `secret \`${id}\` is not set (or not declared in plinth.toml)`,
      });
    }
    return value;
  },
};

/**
 * Log lines that reach the host's structured logs, tagged with the tool, its
 * version and the call id. (`console.log` and `console.error` reach them too,
 * as the tool's stdout and stderr.)
 */
export const log = {
  /** @param {string} message */
  debug: (message) => writeLog('debug', String(message)),
  /** @param {string} message */
  info: (message) => writeLog('info', String(message)),
  /** @param {string} message */
  warn: (message) => writeLog('warn', String(message)),
  /** @param {string} message */
  error: (message) => writeLog('error', String(message)),
};

/**
 * A response whose body has been read in full.
 */
export class HttpResponse {
  /**
   * @param {number} status
   * @param {Headers} headers
   * @param {string} text
   * @param {string} url
   */
  constructor(status, headers, text, url) {
    /** @type {number} The HTTP status code. */
    this.status = status;
    /** @type {Headers} */
    this.headers = headers;
    /** @type {string} The body, as text. */
    this.text = text;
    /** @type {string} */
    this.url = url;
  }

  /** @returns {boolean} Whether the status is 2xx. */
  get ok() {
    return this.status >= 200 && this.status < 300;
  }

  /**
   * The body parsed as JSON; a ToolError (not retryable) when it is not JSON.
   * @returns {any}
   */
  json() {
    try {
      return JSON.parse(this.text);
    } catch (e) {
      throw new ToolError('the backend service sent an answer this tool does not understand', {
        developerMessage: `${describeError(e)} (${this.url})`,
      });
    }
  }
}

/**
 * Outbound HTTP over `wasi:http/outgoing-handler` (the engine's `fetch`),
 * limited by the host to the hosts the tool declares in plinth.toml. A request
 * that cannot be made at all becomes a retryable ToolError ("the backend
 * service could not be reached"); any HTTP status is returned as is.
 */
export const http = {
  /**
   * Sends one request and reads the whole response.
   * @param {string} method `GET`, `POST`…
   * @param {string} url
   * @param {object} [options]
   * @param {any} [options.json] A value sent as a JSON body (sets content-type).
   * @param {string | Uint8Array} [options.body] A raw body.
   * @param {Record<string, string>} [options.headers]
   * @returns {Promise<HttpResponse>}
   */
  async request(method, url, { json, body, headers = {} } = {}) {
    const init = { method, headers: { ...headers } };
    if (json !== undefined) {
      init.body = JSON.stringify(json);
      init.headers['content-type'] ??= 'application/json';
    } else if (body !== undefined) {
      init.body = body;
    }
    try {
      const response = await fetch(url, init);
      return new HttpResponse(response.status, response.headers, await response.text(), url);
    } catch (e) {
      throw ToolError.retry('the backend service could not be reached', 1000, {
        developerMessage: `${describeError(e)} (${method} ${url})`,
      });
    }
  },

  /**
   * `GET url`.
   * @param {string} url
   * @param {{headers?: Record<string, string>}} [options]
   * @returns {Promise<HttpResponse>}
   */
  get(url, options) {
    return http.request('GET', url, options);
  },

  /**
   * `POST url` with `json` as a JSON body.
   * @param {string} url
   * @param {any} json
   * @param {{headers?: Record<string, string>}} [options]
   * @returns {Promise<HttpResponse>}
   */
  post(url, json, options = {}) {
    return http.request('POST', url, { ...options, json });
  },
};

/** A thrown value's words, for a developer message. */
function describeError(e) {
  if (e && typeof e === 'object' && 'payload' in e) return JSON.stringify(e.payload);
  if (e instanceof Error) return e.message;
  return String(e);
}

// Builds a JavaScript tool into a component with componentize-js; run by
// `plinth pack` (the contract is in host/src/build.rs):
//
//   node build.mjs --node-modules NM --source BUILD_DIR/tool.js --wit WIT_DIR --world WORLD --out OUT.wasm
//
// componentize-js is imported from NM by absolute path: this script runs from
// a temporary directory, where a bare specifier would find nothing.

import { writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const usage = 'usage: node build.mjs --node-modules DIR --source tool.js --wit DIR --world NAME --out OUT.wasm';
const args = {};
for (let i = 2; i < process.argv.length; i += 2) {
  const [flag, value] = [process.argv[i], process.argv[i + 1]];
  if (!flag.startsWith('--') || value === undefined) fail(usage);
  args[flag.slice(2)] = value;
}
for (const required of ['node-modules', 'source', 'wit', 'world', 'out']) {
  if (!args[required]) fail(`--${required} is missing; ${usage}`);
}

const entry = join(resolve(args['node-modules']), '@bytecodealliance/componentize-js/src/componentize.js');
const { componentize } = await import(pathToFileURL(entry).href);

// The engine's features (componentize-js 0.23 enables all five by default):
// - stdio: console.log/console.error and uncaught errors reach the host's
//   logs as the tool's stdout/stderr (without it, errors trap silently);
// - random: crypto.getRandomValues and Math.random (without it they would
//   replay the values fixed at build time);
// - clocks: Date.now, performance.now, setTimeout;
// - http: `fetch`, over the wasi:http/outgoing-handler the world imports;
// kept. Disabled:
// - fetch-event: serving incoming HTTP requests; a tool exports `call`.
const disableFeatures = ['fetch-event'];

// componentize-js names the tool's modules relative to the working
// directory when the source lies under it (as in stack traces): run from
// the source's own directory, so they read `tool.js:12`.
const [source, wit, out] = [resolve(args.source), resolve(args.wit), resolve(args.out)];
process.chdir(dirname(source));

try {
  const { component } = await componentize({
    sourcePath: source,
    witPath: wit,
    worldName: args.world,
    disableFeatures,
  });
  await writeFile(out, component);
} catch (e) {
  fail(`componentize-js could not build ${args.source}: ${e?.message ?? e}`);
}

function fail(message) {
  console.error(message);
  process.exit(1);
}

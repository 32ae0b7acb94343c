// Runs componentize-js for `plinth pack` (the JavaScript helper replaces this file).
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
const args = Object.fromEntries(process.argv.slice(2).reduce((pairs, a, i, all) => (i % 2 ? pairs : [...pairs, [a.slice(2), all[i + 1]]]), []));
const { componentize } = await import(pathToFileURL(join(args['node-modules'], '@bytecodealliance/componentize-js/src/componentize.js')));
const { component } = await componentize({ sourcePath: args.source, witPath: args.wit, worldName: args.world });
await writeFile(args.out, component);

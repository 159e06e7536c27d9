// Regenerates docs/openapi.json from the route schemas: `npm run openapi`.
import { writeFileSync } from 'node:fs';
import { generateOpenApi } from '../src/openapi.js';

const doc = await generateOpenApi();
writeFileSync(new URL('../docs/openapi.json', import.meta.url), `${JSON.stringify(doc, null, 2)}\n`);
console.log(`docs/openapi.json: ${Object.keys(doc.paths as object).length} paths`);

// CTest fixture `openai.install`: installs the pinned client (package-lock.json) into
// node_modules with `npm ci`, unless node_modules already holds exactly those versions
// (so that a second run needs no network).
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const read = (f) => JSON.parse(readFileSync(path.join(here, f), 'utf8'));
const versions = (lock) =>
  JSON.stringify(Object.entries(lock.packages ?? {}).filter(([k]) => k).map(([k, v]) => [k, v.version]).sort());

const wanted = versions(read('package-lock.json'));
if (existsSync(path.join(here, 'node_modules', '.package-lock.json')) &&
    versions(read('node_modules/.package-lock.json')) === wanted) {
  console.log('openai client already installed:', wanted);
} else {
  const npm = process.env.LOOM_NPM || 'npm';
  execFileSync(npm, ['ci', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: here, stdio: 'inherit' });
  console.log('installed:', versions(read('node_modules/.package-lock.json')));
}

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { END, replaceBenchTable, START, writeBenchTable } from '../../../bench/lib/report.js';
import { REPO_ROOT } from '../../helpers/paths.js';

const PAGE = `# Performance\n\nIntro.\n\n${START}\nold table\nold line\n${END}\n\n## Notes\n\nKept.\n`;

test('the bench table replaces only the text between the markers', () => {
  assert.equal(
    replaceBenchTable(PAGE, '| a |\n|---|\n| 1 |'),
    `# Performance\n\nIntro.\n\n${START}\n| a |\n|---|\n| 1 |\n${END}\n\n## Notes\n\nKept.\n`,
  );
});

test('writing the same table twice gives the same page', () => {
  const once = replaceBenchTable(PAGE, 'table');
  assert.equal(replaceBenchTable(once, 'table'), once);
  assert.equal(replaceBenchTable(replaceBenchTable(once, 'other'), 'table'), once);
});

test('a page without both markers, with them out of order or twice, is refused with a clear message', () => {
  const message = /^Error: docs\/performance\.md needs one <!-- bench:start --> line and, after it, one <!-- bench:end --> line around the bench table$/;
  for (const text of [
    '# Performance\n',
    `${START}\nno end\n`,
    `no start\n${END}\n`,
    `${END}\n${START}\n`,
    `${START}\n${END}\n${START}\n${END}\n`,
  ]) {
    assert.throws(() => replaceBenchTable(text, 'table', 'docs/performance.md'), (err: Error) => message.test(String(err)), text);
  }
});

test('prose naming the markers is not a marker: the performance page itself takes a table', () => {
  const prose = `The run writes between the \`${START}\` and \`${END}\` markers.\n\n${PAGE}`;
  assert.equal(replaceBenchTable(prose, 'new'), prose.replace('old table\nold line', 'new'));
  const page = fs.readFileSync(path.join(REPO_ROOT, 'docs', 'performance.md'), 'utf8');
  assert.match(replaceBenchTable(page, 'new'), new RegExp(`\n${START}\nnew\n${END}\n`));
});

test('writeBenchTable rewrites the file in place and leaves a page without markers unchanged', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-table-'));
  try {
    const page = path.join(dir, 'performance.md');
    fs.writeFileSync(page, PAGE);
    writeBenchTable(page, 'new');
    assert.equal(fs.readFileSync(page, 'utf8'), `# Performance\n\nIntro.\n\n${START}\nnew\n${END}\n\n## Notes\n\nKept.\n`);
    fs.writeFileSync(page, '# no markers\n');
    assert.throws(() => writeBenchTable(page, 'new'), /needs one <!-- bench:start --> line/);
    assert.equal(fs.readFileSync(page, 'utf8'), '# no markers\n');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

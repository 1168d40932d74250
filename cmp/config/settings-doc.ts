import { SETTING_GROUPS, SETTINGS } from './settings.js';

/**
 * docs/configuration.md and the main settings of README.md, written from the settings table
 * (cmp/config/settings.ts) so that neither can drift from the code: `npm run docs:config` writes
 * them, and a unit test compares.
 */
export function renderConfigurationDoc(): string {
  const out = [
    '# Configuration',
    '',
    '<!-- Generated from cmp/config/settings.ts by `npm run docs:config`; do not edit by hand. -->',
    '',
    'Every setting is read once at start. A bad `CMP_OFFLOAD_*` value stops the process with a message',
    "naming the variable. Argo's own variables keep Argo's names, defaults and leniency (an invalid",
    'value means the default). Byte sizes accept `512Mi`, `2Gi`, `100M` or a plain number; durations',
    'are Go durations (`90s`, `1m30s`, `24h`). A setting and its `_FILE` form are exclusive: the file',
    'holds the value (one trailing newline dropped).',
    '',
  ];
  for (const [group, title] of Object.entries(SETTING_GROUPS)) {
    out.push(`## ${title}`, '', '| setting | default | meaning |', '|---|---|---|');
    for (const s of SETTINGS.filter(s => s.group === group)) {
      out.push(`| ${s.names.map(n => `\`${n}\``).join(' / ')} | ${s.default} | ${s.meaning} |`);
    }
    out.push('');
  }
  return out.join('\n');
}

export const README_SETTINGS_START = '<!-- settings:start -->';
export const README_SETTINGS_END = '<!-- settings:end -->';

/** The README's table of the main settings (those with a `summary`), between its markers. */
export function renderReadmeSettings(): string {
  const rows = SETTINGS.flatMap(s => {
    if (!('summary' in s)) return [];
    return [`| ${s.names.map(n => `\`${n}\``).join(' / ')} | ${s.summary.default} | ${s.summary.meaning} |`];
  });
  return [README_SETTINGS_START, '| setting | default | meaning |', '|---|---|---|', ...rows, README_SETTINGS_END].join('\n');
}

/** `readme` with its main-settings block replaced by {@link renderReadmeSettings}; throws without the markers. */
export function withReadmeSettings(readme: string): string {
  const a = readme.indexOf(README_SETTINGS_START);
  const b = readme.indexOf(README_SETTINGS_END);
  if (a < 0 || b < a) throw new Error(`README.md has no ${README_SETTINGS_START} … ${README_SETTINGS_END} block`);
  return readme.slice(0, a) + renderReadmeSettings() + readme.slice(b + README_SETTINGS_END.length);
}

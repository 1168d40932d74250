import { SETTING_GROUPS, SETTINGS } from './settings.js';

/**
 * docs/configuration.md, written from the settings table (cmp/config/settings.ts) so that the
 * page cannot drift from the code: `npm run docs:config` writes it, and a unit test compares.
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

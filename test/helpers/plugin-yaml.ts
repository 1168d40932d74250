/**
 * A plugin.yaml (ConfigManagementPlugin) with the given name and spec body (YAML, indented under
 * `spec:`), and `metadata.annotations` when given.
 */
export function pluginYaml(name: string, spec: string, annotations: Record<string, string> = {}): string {
  const notes = Object.entries(annotations).map(([k, v]) => `    ${JSON.stringify(k)}: ${JSON.stringify(v)}\n`);
  return `apiVersion: argoproj.io/v1alpha1\nkind: ConfigManagementPlugin\nmetadata:\n  name: ${name}\n${notes.length ? `  annotations:\n${notes.join('')}` : ''}spec:\n${spec
    .split('\n')
    .map(l => `  ${l}`)
    .join('\n')}\n`;
}

/** A plugin.yaml (ConfigManagementPlugin) with the given name and spec body (YAML, indented under `spec:`). */
export function pluginYaml(name: string, spec: string): string {
  return `apiVersion: argoproj.io/v1alpha1\nkind: ConfigManagementPlugin\nmetadata:\n  name: ${name}\nspec:\n${spec
    .split('\n')
    .map(l => `  ${l}`)
    .join('\n')}\n`;
}

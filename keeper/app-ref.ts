/** Where an Application lives in the cluster. */
export interface AppRef {
  namespace: string;
  name: string;
}

/** A DNS-1123 subdomain (Application names) and label (namespaces): neither holds `_`. */
const SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;
const LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/**
 * The Application an ARGOCD_APP_NAME names. Argo CD passes the app's instance name: `<name>`
 * for an app in Argo CD's own namespace, `<namespace>_<name>` for one elsewhere (apps in any
 * namespace); neither part can hold `_`. Undefined for anything else: the name comes from a
 * request and goes into an API path.
 */
export function appRefOf(instanceName: string, argocdNamespace: string): AppRef | undefined {
  const parts = instanceName.split('_');
  if (parts.length > 2) return undefined;
  const [namespace, name] = parts.length === 2 ? [parts[0]!, parts[1]!] : [argocdNamespace, parts[0]!];
  return LABEL.test(namespace) && SUBDOMAIN.test(name) ? { namespace, name } : undefined;
}

import { Status } from '../grpc-status.js';
import type { ParameterAnnouncement } from '../../proto/generated/reposerver/repository/repository.js';
import { CmpError } from '../errors.js';
import { GoJsonError, goJsonUnmarshal, goPtr, goSlice } from '../go/go-json-decode.js';
import { parameterAnnouncementType, type PluginConfig } from '../config/plugin-config.js';

/** Argo decodes the dynamic command's stdout into `[]*apiclient.ParameterAnnouncement`. */
const announcementListType = goSlice(goPtr(parameterAnnouncementType));

/**
 * What Argo's server answers when a nil announcement reaches the gogo marshaller: it panics and the
 * recovery interceptor turns the panic into INTERNAL (docs/argo-contract.md#getparametersannouncement).
 */
function nilAnnouncementPanic(): CmpError {
  return new CmpError('runtime error: invalid memory address or nil pointer dereference', Status.INTERNAL);
}

/**
 * Decode the dynamic parameters command's stdout as Go's json.Unmarshal does (docs/argo-contract.md#getparametersannouncement). Throws a
 * CmpError (UNKNOWN) with the bare Go json error text, which the caller prefixes; a `null`
 * element throws the INTERNAL panic error, which must be passed on unwrapped.
 */
export function parseDynamicParameters(stdout: string): ParameterAnnouncement[] {
  let list: Array<ParameterAnnouncement | null>;
  try {
    list = goJsonUnmarshal(stdout, announcementListType);
  } catch (err) {
    throw err instanceof GoJsonError ? new CmpError(err.message) : err;
  }
  if (list.includes(null)) throw nilAnnouncementPanic();
  return list as ParameterAnnouncement[];
}

/**
 * The GetParametersAnnouncement list: dynamic entries first, then the static ones from plugin.yaml,
 * order kept, no de-duplication. A nil static entry (`- ~`) fails like Argo's marshal panic.
 */
export function announceParameters(config: PluginConfig, dynamicOut: ParameterAnnouncement[] = []): ParameterAnnouncement[] {
  const all = [...dynamicOut, ...config.spec.parameters.static];
  if (all.includes(null)) throw nilAnnouncementPanic();
  // Copies: callers may encode or mutate the list; the parsed config stays as read.
  return structuredClone(all as ParameterAnnouncement[]);
}

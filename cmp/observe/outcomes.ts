/** How a request met the output cache: `bypass` = no key (cache off or tree not indexable), `index` = answered from the tree index. */
export type CacheResult = 'hit' | 'miss' | 'coalesced' | 'bypass' | 'index';

/** Why a plugin command was killed. */
export type KillReason = 'fatal_timeout' | 'canceled' | 'output_limit';

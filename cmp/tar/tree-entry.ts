/** One path of the tree as extraction would leave it. */
export interface TreeEntry {
  /** Relative to the extraction root, cleaned (`a/b.txt`). */
  path: string;
  type: 'file' | 'dir' | 'symlink';
  /**
   * Permission bits the path gets when `preserveFileMode` is on: the header mode & 0o777 of
   * the entry that created it (0o755 for parents created for a file), kept on overwrite.
   */
  mode: number;
  /** Content size of files. */
  size: number;
  /** Hex sha256 of the content of files. */
  sha256?: string;
  /** Raw link name of symlinks (before Argo re-roots and relativises it). */
  linkTarget?: string;
  /**
   * Symlinks of a traceable tree: whether the target existed when the link was extracted. It
   * decides whether extraction relativises the real or the lexical target (they differ when the
   * work dir's own path holds a symlink), so it is part of the link's state.
   */
  targetExisted?: boolean;
}

/**
 * Go's os.Expand: replaces `$name` / `${name}` using `mapping`. Reproduced rule for rule because
 * plugin env values go through it (v1alpha1.Env.Envsubst): shell special variables (`$1`, `$$`,
 * `$*`, ...) are one character, `${}` and an unterminated `${` are eaten, a `$` not followed by a
 * name is kept.
 */
export function goExpand(s: string, mapping: (name: string) => string): string {
  let out = '';
  let i = 0;
  for (let j = 0; j < s.length; j++) {
    if (s[j] === '$' && j + 1 < s.length) {
      out += s.slice(i, j);
      const [name, width] = shellName(s.slice(j + 1));
      if (name === '' && width > 0) {
        // invalid syntax: the characters are eaten
      } else if (name === '') {
        out += '$';
      } else {
        out += mapping(name);
      }
      j += width;
      i = j + 1;
    }
  }
  return out + s.slice(i);
}

function isShellSpecial(c: string | undefined): boolean {
  return c !== undefined && '*#$@!?-0123456789'.includes(c);
}

function isAlphaNum(c: string | undefined): boolean {
  return c !== undefined && /^[A-Za-z0-9_]$/.test(c);
}

/** Go's getShellName: the variable name after a `$` and how many characters it spans. */
function shellName(s: string): [string, number] {
  if (s[0] === '{') {
    if (s.length > 2 && isShellSpecial(s[1]) && s[2] === '}') return [s.slice(1, 2), 3];
    for (let i = 1; i < s.length; i++) {
      if (s[i] === '}') return i === 1 ? ['', 2] : [s.slice(1, i), i + 1];
    }
    return ['', 1];
  }
  if (isShellSpecial(s[0])) return [s.slice(0, 1), 1];
  let i = 0;
  while (i < s.length && isAlphaNum(s[i])) i++;
  return [s.slice(0, i), i];
}

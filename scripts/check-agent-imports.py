#!/usr/bin/env python3
"""No circle of imports inside the agent (agent/src), and no source file
there over the size limit without a reason in its header.

The graph's nodes are modules: a header foo.h and the foo.c beside it are
one module; any other file is a module of its own. Module A depends on
module B when a file of A includes B's header, or when A's header declares
a function that a file of B defines (a header that declares what others
implement makes its includers depend on those implementers, as the old
agent_internal.h did). Any cycle in that graph fails the check, printed
file by file.

Size: a source file over LIMIT lines fails unless its opening comment
says why (a line containing "Longer than" followed by the reason), or it
is one of the files named with --skip.

Usage: check-agent-imports.py AGENT_SRC_DIR [--limit N] [--skip REL ...]
Exit status 0 when clean, 1 with the findings on stderr.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# A declaration in a header: at column 0, not static, a vma_ name before "(".
DECL = re.compile(r'^(?!static|#|typedef|\s|/|\*|})[^=;(]*?\b(vma_\w+)\s*\(')
# A definition in a .c file: same shape on a line not ending a prototype.
DEFN = DECL


def strip_comments(text):
    return re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)


def scan(root):
    files = {}
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith(('.c', '.h')):
                p = os.path.join(d, n)
                files[os.path.relpath(p, root)] = open(p, encoding='utf-8').read()
    return files


def module_of(rel):
    return os.path.splitext(rel)[0]


def resolve(rel, inc, files):
    """The agent file rel's #include "inc" names, or None (outside agent/src)."""
    for cand in (os.path.normpath(os.path.join(os.path.dirname(rel), inc)), os.path.normpath(inc)):
        if cand in files:
            return cand
    return None


def graph(files):
    defined = {}  # function -> modules defining it
    declared = {}  # header -> functions it declares
    for rel, text in files.items():
        lines = strip_comments(text).split('\n')
        for i, line in enumerate(lines):
            m = DECL.match(line)
            if not m:
                continue
            if rel.endswith('.h'):
                declared.setdefault(rel, set()).add(m.group(1))
            else:
                # a definition: the statement continues to a "{", not a ";"
                rest = ' '.join(lines[i:i + 8])
                brace, semi = rest.find('{'), rest.find(';')
                if brace >= 0 and (semi < 0 or brace < semi):
                    defined.setdefault(m.group(1), set()).add(module_of(rel))
    deps = {}
    for rel, text in files.items():
        a = module_of(rel)
        deps.setdefault(a, set())
        for line in text.split('\n'):
            m = INCLUDE.match(line)
            if m:
                h = resolve(rel, m.group(1), files)
                if h and module_of(h) != a:
                    deps[a].add((module_of(h), '%s includes %s' % (rel, h)))
        if rel.endswith('.h'):
            for fn in declared.get(rel, ()):
                for b in defined.get(fn, ()):
                    if b != a:
                        deps[a].add((b, '%s declares %s, defined in %s' % (rel, fn, b)))
    return deps


def cycles(deps):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w, _ in sorted(deps.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(deps):
        if v not in index:
            visit(v)
    return out


def main(argv):
    args = argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    root, limit, skip = args[0], 600, set()
    i = 1
    while i < len(args):
        if args[i] == '--limit':
            limit = int(args[i + 1])
            i += 2
        elif args[i] == '--skip':
            i += 1
            while i < len(args) and not args[i].startswith('--'):
                skip.add(args[i])
                i += 1
        else:
            print('unknown argument %s' % args[i], file=sys.stderr)
            return 2
    files = scan(root)
    if not files:
        print('no sources under %s' % root, file=sys.stderr)
        return 2
    bad = 0
    deps = graph(files)
    for comp in cycles(deps):
        bad = 1
        members = set(comp)
        print('circle of imports among %d modules: %s' % (len(comp), ', '.join(comp)), file=sys.stderr)
        for a in comp:
            for b, why in sorted(deps[a]):
                if b in members:
                    print('  %s -> %s: %s' % (a, b, why), file=sys.stderr)
    for rel, text in sorted(files.items()):
        n = text.count('\n')
        if n <= limit or rel in skip:
            continue
        head = text.split('*/', 1)[0]
        if 'Longer than' not in head:
            bad = 1
            print('%s has %d lines (limit %d) and no reason in its header comment '
                  '("Longer than ...")' % (rel, n, limit), file=sys.stderr)
    return bad


if __name__ == '__main__':
    sys.exit(main(sys.argv))

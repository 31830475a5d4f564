#!/usr/bin/env python3
"""test/lib/majors_table.py: the README's table of supported PostgreSQL
majors, made from what test/all.sh ran.

    majors_table.py row VERSION SOURCE LOG   one Markdown row for one major,
                                             from its test/all.sh output
    majors_table.py readme README ROWS       put the header and ROWS (a file
                                             of rows) between the README's
                                             majors-table markers

test/all.sh prints the rows after its summary (and with LE_README_TABLE=1
writes them into README.md), so the table says what a run saw: how the
server was obtained, how many pg_regress and isolation tests passed, the TAP
files and tests, which TAP files skipped and why, and the client examples.
"""
import re
import sys

BEGIN = '<!-- majors-table:begin (test/all.sh writes this table; LE_README_TABLE=1) -->'
END = '<!-- majors-table:end -->'
HEADER = ('| PostgreSQL | server | pg_regress | isolation | TAP | skipped TAP files | client examples | suites |\n'
          '|---|---|---|---|---|---|---|---|\n')


def row(version, source, log_path):
    with open(log_path, encoding='utf-8', errors='replace') as f:
        log = re.sub(r'\x1b\[[0-9;]*m', '', f.read())
    # pg_regress, then the isolation tester (test/all.sh runs them in that
    # order): "All N tests passed." or "M of N tests failed." (with a "# "
    # in front on PostgreSQL 16 and later).
    runs = []
    for m in re.finditer(r'All (\d+) tests passed|(\d+) of (\d+) tests failed', log):
        runs.append(f'{m.group(1)}/{m.group(1)}' if m.group(1)
                    else f'{int(m.group(3)) - int(m.group(2))}/{m.group(3)}')
    regress = runs[0] if len(runs) > 0 else 'did not run'
    isolation = runs[1] if len(runs) > 1 else 'did not run'
    tap = 'did not run'
    m = re.search(r'^Files=(\d+), Tests=(\d+),.*$', log, re.M)
    if m:
        result = re.search(r'^Result: (\w+)', log[m.end():], re.M)
        tap = f'{m.group(1)} files, {m.group(2)} tests, {result.group(1) if result else "?"}'
    skipped = [f'{name} ({why.strip()})' for name, why in
               re.findall(r'test/t/(\w+)\.pl \.+ skipped: (.*)$', log, re.M)]
    clients = len(re.findall(r'^==> client example ', log, re.M))
    clients_failed = len(re.findall(r'^FAILED: client example ', log, re.M))
    suites = re.findall(r'^suites: (\d+) passed, (\d+) failed$', log, re.M)
    suites = f'{suites[-1][0]} passed, {suites[-1][1]} failed' if suites else 'did not finish'
    cells = [version, source, regress, isolation, tap, '; '.join(skipped) or 'none',
             f'{clients - clients_failed}/{clients}', suites]
    return '| ' + ' | '.join(c.replace('|', '/') for c in cells) + ' |'


def readme(path, rows_path):
    with open(rows_path, encoding='utf-8') as f:
        rows = f.read().strip() + '\n'
    with open(path, encoding='utf-8') as f:
        text = f.read()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        sys.exit(f'{path}: no majors-table markers')
    text = text[:start] + BEGIN + '\n' + HEADER + rows + text[end:]
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)


if __name__ == '__main__':
    if len(sys.argv) == 5 and sys.argv[1] == 'row':
        print(row(*sys.argv[2:]))
    elif len(sys.argv) == 4 and sys.argv[1] == 'readme':
        readme(*sys.argv[2:])
    else:
        sys.exit(__doc__)

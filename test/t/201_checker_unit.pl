# 201_checker_unit.pl: unit test of the stress-test checkers
# (test/stress/LeStressCheck.pm, run by test/stress/check.pl).
#
# A checker that never fails proves nothing (research/anchors-reliability.md
# §A.3).  This test writes a small, hand-made correct history in the format
# le_stress and the nemesis write, checks that it passes, then breaks it in
# one way at a time -- an overlap, a reused term, a term going back, a
# stale write, a phantom ok, a failed grant that committed, a lost
# acknowledged write, a missing recovery -- and checks that the checker
# responsible reports each.  It goes through the files and check.pl, so the
# parsing is tested too.  Needs no server.
use strict;
use warnings;

use lib 'test/stress';
use LeStressCheck qw(load_dir check);
use PostgreSQL::Test::Utils;
use Storable qw(dclone);
use Test::More;

# Server times in epoch microseconds, client times in monotonic ns.
my $S = 1_700_000_000_000_000;
my $M = 50_000_000_000;
my $sec = 1_000_000_000;

# A correct history: c0 holds term 1, renews, writes, releases; c1 takes
# term 2 and lets it expire; a terminate fault; c2 takes term 3.
my $good = {
	params => [ [ ttl_ms => 1000 ], [ retry_ms => 250 ], [ stall_ms => 0 ] ],
	history => [
		[ 'n', 1, 'c0', $S + 1_000_000, $S + 2_000_000, 'released', 'f' ],
		[ 'n', 2, 'c1', $S + 2_100_000, $S + 3_100_000, 'expired',  'f' ],
		[ 'n', 3, 'c2', $S + 3_200_000, '\N',           '\N',       'f' ],
	],
	# id name term holder kind client seq at acquired renewed expires
	audit => [
		[ 1, 'n', 1, 'c0', 'acquire', 0, 1, $S + 1_000_010, $S + 1_000_000, $S + 1_000_000, $S + 2_000_000 ],
		[ 2, 'n', 1, 'c0', 'renew',   0, 3, $S + 1_500_010, $S + 1_000_000, $S + 1_500_000, $S + 2_500_000 ],
		[ 3, 'n', 1, 'c0', 'release', 0, 4, $S + 2_000_010, '\N', '\N', '\N' ],
		[ 4, 'n', 2, 'c1', 'acquire', 1, 1, $S + 2_100_010, $S + 2_100_000, $S + 2_100_000, $S + 3_100_000 ],
		[ 5, 'n', 3, 'c2', 'acquire', 2, 1, $S + 3_200_010, $S + 3_200_000, $S + 3_200_000, $S + 4_200_000 ],
	],
	# name pos term holder client seq at
	effects => [
		[ 'n', 1, 1, 'c0', 0, 2, $S + 1_200_000 ],
		[ 'n', 2, 2, 'c1', 1, 2, $S + 2_200_000 ],
		[ 'n', 3, 3, 'c2', 2, 2, $S + 3_300_000 ],
	],
	# client op invoke complete result term sqlstate seq name holder
	client => [
		[ 0, 'acquire', $M + 1 * $sec,  $M + 1 * $sec + 5,  'ok',   1,   '-',     1, 'n', 'c0' ],
		[ 0, 'effect',  $M + 2 * $sec,  $M + 2 * $sec + 5,  'ok',   1,   '-',     2, 'n', 'c0' ],
		[ 0, 'renew',   $M + 3 * $sec,  $M + 3 * $sec + 5,  'ok',   1,   '-',     3, 'n', 'c0' ],
		[ 0, 'release', $M + 4 * $sec,  $M + 4 * $sec + 5,  'ok',   1,   '-',     4, 'n', 'c0' ],
		[ 1, 'acquire', $M + 5 * $sec,  $M + 5 * $sec + 5,  'ok',   2,   '-',     1, 'n', 'c1' ],
		[ 1, 'effect',  $M + 6 * $sec,  $M + 6 * $sec + 5,  'ok',   2,   '-',     2, 'n', 'c1' ],
		[ 3, 'acquire', $M + 7 * $sec,  $M + 7 * $sec + 5,  'fail', '-', '-',     1, 'n', 'c3' ],
		[ 3, 'effect',  $M + 7 * $sec,  $M + 7 * $sec + 9,  'info', 2,   '08006', 2, 'n', 'c3' ],
		[ 2, 'acquire', $M + 9 * $sec,  $M + 9 * $sec + 5,  'ok',   3,   '-',     1, 'n', 'c2' ],
		[ 2, 'effect',  $M + 10 * $sec, $M + 10 * $sec + 5, 'ok',   3,   '-',     2, 'n', 'c2' ],
		[ 3, 'acquire', $M + 20 * $sec, $M + 20 * $sec + 5, 'fail', '-', '-',     3, 'n', 'c3' ],
	],
	# kind start heal detail
	nemesis => [ [ 'terminate', $M + 8 * $sec, $M + 8 * $sec + 1, 'backend=1 client=c1' ] ],
};

sub write_dir
{
	my ($h) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir('check');
	my %files = (
		'history.tsv' => [ "\t", $h->{history} ],
		'audit.tsv'   => [ "\t", $h->{audit} ],
		'effects.tsv' => [ "\t", $h->{effects} ],
		'client.log'  => [ ' ',  $h->{client} ],
		'nemesis.log' => [ ' ',  $h->{nemesis} ],
		'params'      => [ ' ',  $h->{params} ]);
	for my $f (keys %files)
	{
		my ($sep, $rows) = @{ $files{$f} };
		open my $fh, '>', "$dir/$f" or die "$dir/$f: $!";
		print $fh join($sep, @$_), "\n" for @$rows;
		close $fh;
	}
	return $dir;
}

sub row_of
{
	my ($rows, $match) = @_;
	my ($r) = grep { $match->($_) } @$rows;
	die 'no such row' unless $r;
	return $r;
}

# The baseline passes, through the library and through check.pl.
my $dir = write_dir($good);
my $r = check(load_dir($dir));
is(scalar @{ $r->{violations} }, 0, 'a correct history has no violation')
  or diag(explain($r->{violations}));
is($r->{figures}{grants}, 3, 'the correct history has 3 grants');
is(system($^X, 'test/stress/check.pl', $dir) >> 8, 0, 'check.pl exits 0 on it');

# Each bad history: [description, checker that must catch it, mutation].
my @bad = (
	[
		'overlap: term 2 granted while term 1 (released later) still ran', 'C3',
		sub {
			my $h = shift;
			my $a = row_of($h->{audit}, sub { $_[0][0] == 4 });
			@$a[ 8, 9 ] = ($S + 1_900_000, $S + 1_900_000);
			row_of($h->{history}, sub { $_[0][1] == 2 })->[3] = $S + 1_900_000;
			row_of($h->{effects}, sub { $_[0][1] == 2 })->[6] = $S + 1_950_000;
		}
	],
	[
		'overlap: term 3 granted before term 2 expired (no release)', 'C3',
		sub {
			my $h = shift;
			my $a = row_of($h->{audit}, sub { $_[0][0] == 5 });
			@$a[ 8, 9 ] = ($S + 3_000_000, $S + 3_000_000);
			row_of($h->{history}, sub { $_[0][1] == 3 })->[3] = $S + 3_000_000;
		}
	],
	[
		'history records an expiry other than the last renewed expires_at', 'C3',
		sub {
			my $h = shift;
			row_of($h->{history}, sub { $_[0][1] == 2 })->[4] = $S + 3_050_000;
		}
	],
	[
		'history leaves a term open although a later term began', 'C3',
		sub {
			my $h = shift;
			@{ row_of($h->{history}, sub { $_[0][1] == 2 }) }[ 4, 5 ] = ('\N', '\N');
		}
	],
	[
		'reused term: term 2 granted again, to c2', 'C1',
		sub {
			my $h = shift;
			row_of($h->{audit}, sub { $_[0][0] == 5 })->[2] = 2;
		}
	],
	[
		'two clients told they hold the same term', 'C1',
		sub {
			my $h = shift;
			row_of($h->{client}, sub { $_[0][0] == 2 && $_[0][1] eq 'acquire' })->[5] = 2;
		}
	],
	[
		'term going back in grant order', 'C2',
		sub {
			my $h = shift;
			row_of($h->{audit}, sub { $_[0][0] == 4 })->[0] = 6;
		}
	],
	[
		'stale write: a term-2 effect committed after a term-3 effect', 'C4',
		sub {
			my $h = shift;
			push @{ $h->{effects} }, [ 'n', 4, 2, 'c1', 1, 3, $S + 3_400_000 ];
			push @{ $h->{client} },
			  [ 1, 'effect', $M + 11 * $sec, $M + 11 * $sec + 5, 'ok', 2, '-', 3, 'n', 'c1' ];
		}
	],
	[
		'an effect in a term written by a client that did not hold it', 'C4',
		sub {
			my $h = shift;
			row_of($h->{effects}, sub { $_[0][1] == 3 })->[3] = 'c1';
		}
	],
	[
		'phantom ok: a client told it won term 4, which the server never granted', 'C5',
		sub {
			my $h = shift;
			push @{ $h->{client} },
			  [ 3, 'acquire', $M + 12 * $sec, $M + 12 * $sec + 5, 'ok', 4, '-', 4, 'n', 'c3' ];
		}
	],
	[
		'a definitely failed acquisition whose grant committed', 'C5',
		sub {
			my $h = shift;
			row_of($h->{audit}, sub { $_[0][0] == 5 })->[5] = 3;    # client 3 seq 1
		}
	],
	[
		'a grant in history that the audit does not have', 'C5',
		sub {
			my $h = shift;
			push @{ $h->{history} }, [ 'n', 4, 'c3', $S + 5_000_000, '\N', '\N', 'f' ];
		}
	],
	[
		'an acknowledged effect missing from the table', 'C7',
		sub {
			my $h = shift;
			$h->{effects} = [ grep { $_->[1] != 3 } @{ $h->{effects} } ];
		}
	],
	[
		'no leader after the fault healed', 'C6',
		sub {
			my $h = shift;
			$h->{client} = [ grep { !($_->[0] == 2 && $_->[1] eq 'acquire') } @{ $h->{client} } ];
		}
	],
	[
		'the run ended before liveness after the last fault could be judged', 'C6',
		sub {
			my $h = shift;
			$h->{client} = [ grep { $_->[2] < $M + 15 * $sec
				  && !($_->[0] == 2 && $_->[1] eq 'acquire') } @{ $h->{client} } ];
		}
	],
);

for my $case (@bad)
{
	my ($what, $checker, $mutate) = @$case;
	my $h = dclone($good);
	$mutate->($h);
	my $d = write_dir($h);
	my $res = check(load_dir($d));
	my @mine = grep { $_->[0] eq $checker } @{ $res->{violations} };
	ok(@mine > 0, "$checker catches: $what")
	  or diag(explain($res->{violations}));
	note("  $_->[0]: $_->[1]") for @{ $res->{violations} };
	is(system("$^X test/stress/check.pl $d >/dev/null") >> 8, 1, "check.pl exits 1 on: $what")
	  if $what =~ /^(overlap|stale write|phantom)/;
}

done_testing();

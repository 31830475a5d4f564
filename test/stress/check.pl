#!/usr/bin/perl
# check.pl: run the stress-test history checkers (LeStressCheck.pm) over the
# directory of one le_stress run and print its figures and violations.
#
#   perl test/stress/check.pl [--slack-ms N] DIR
#
# Exit status: 0 no violation, 1 violations found, 2 usage or input error.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use Getopt::Long;
use LeStressCheck qw(load_dir check report);

my $slack_ms = 5000;
GetOptions('slack-ms=i' => \$slack_ms) && @ARGV == 1
  or die "usage: $0 [--slack-ms N] DIR\n";

my $result = eval { check(load_dir($ARGV[0]), slack_ms => $slack_ms) };
if (!$result)
{
	print STDERR "check.pl: $@";
	exit 2;
}
print "$_\n" for report($result);
exit(@{ $result->{violations} } ? 1 : 0);

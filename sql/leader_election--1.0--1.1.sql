/*
 * leader_election 1.0 -> 1.1: upgrade script.
 *
 * There is no separate 1.1 install script: CREATE EXTENSION runs the 1.0
 * script and then this one, so a fresh install and an upgraded one are the
 * same by construction (test/t/253_hostile_install.pl checks the upgrade
 * path, every test exercises it).
 *
 * Same rules as the install script: every name and operator
 * schema-qualified, no CREATE OR REPLACE, no IF NOT EXISTS, EXECUTE revoked
 * from PUBLIC on everything that reads or changes a lease.  Each section
 * names the issue it belongs to.
 */

\echo Use "ALTER EXTENSION leader_election UPDATE TO '1.1'" to load this file. \quit

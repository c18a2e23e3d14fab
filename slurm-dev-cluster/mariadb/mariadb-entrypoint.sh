#!/bin/sh
# First start: create the data directory, the accounting database and its user `slurm` with
# the password from the secrets volume (root-only, so this starts as root); then run mariadbd
# in the foreground. mariadbd itself runs as the unprivileged user mysql (--user).
set -eu
if [ ! -d /var/lib/mysql/mysql ]; then
    mariadb-install-db --user=mysql --auth-root-authentication-method=socket --skip-test-db >/dev/null
    mariadbd --user=mysql --skip-networking --socket=/run/mysqld/init.sock &
    until mariadb-admin --socket=/run/mysqld/init.sock ping >/dev/null 2>&1; do sleep 0.5; done
    mariadb --socket=/run/mysqld/init.sock <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'%' IDENTIFIED BY '$(cat /secrets/db.pass)';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'%';
SQL
    mariadb-admin --socket=/run/mysqld/init.sock shutdown
    echo "mariadb-entrypoint: accounting database created"
fi
exec mariadbd --user=mysql --bind-address=0.0.0.0 --innodb-buffer-pool-size=64M

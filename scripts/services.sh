#!/usr/bin/env bash
# Make sure PostgreSQL (127.0.0.1:5432, user postgres over TCP without a
# password) and Redis (127.0.0.1:6379) run on this machine: each is
# installed from Debian's packages if it is missing and started if it is
# not running. `.ci/run` and `make run` call it; a machine where both
# already run is left as it is. When DATABASE_URL or REDIS_URL names
# another place (another host or port, a Sentinel, a cluster, TLS), that
# one is left alone: nothing is checked, installed or started for it
# here, and make run's devstack connects to it (and says so if it
# cannot).
#
#   scripts/services.sh [postgres] [redis] [tools]   (default: postgres redis)
set -euo pipefail

log() { printf '\n== %s\n' "$*"; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
apt_install() {
	as_root apt-get update -qq || true
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# elsewhere URL PORT SCHEME...: true when URL is set and names anything
# but this machine's default server (a scheme of SCHEMEs, the host
# localhost, 127.0.0.1 or ::1, the port PORT or none); it sets where to
# the host and port it names, without credentials.
where=
elsewhere() {
	local url=$1 port=$2 scheme rest host p s
	shift 2
	[ -n "$url" ] || return 1
	case $url in
	*://*) scheme=${url%%://*} rest=${url#*://} ;;
	*) where="a connection string that is not a URL"; return 0 ;;
	esac
	rest=${rest%%/*} rest=${rest%%\?*} rest=${rest##*@} rest=${rest%%,*}
	host=$rest p=$port
	case $rest in
	\[*\]:*) host=${rest%%]*} host=${host#[} p=${rest##*]:} ;;
	\[*\]) host=${rest#[} host=${host%]} ;;
	*:*) host=${rest%:*} p=${rest##*:} ;;
	esac
	where="$host:$p"
	[ -n "$host" ] || where="a local socket"
	for s in "$@"; do
		if [ "$scheme" = "$s" ]; then
			case $host in
			localhost | 127.0.0.1 | ::1) [ "$p" = "$port" ] && return 1 ;;
			esac
		fi
	done
	return 0
}

ensure_postgres() {
	if elsewhere "${DATABASE_URL:-}" 5432 postgres postgresql; then
		log "DATABASE_URL names $where: no local PostgreSQL is checked or installed (make run connects to that one)"
		return
	fi
	command -v pg_isready >/dev/null || apt_install postgresql-client
	if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then return; fi
	if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
		log "installing PostgreSQL from Debian's packages"
		apt_install postgresql
		local ver hba
		ver=$(ls /etc/postgresql | sort -V | tail -n1)
		hba=/etc/postgresql/$ver/main/pg_hba.conf
		# The tests and `make run` connect as postgres over TCP without a password.
		as_root sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+$/\1trust/' "$hba"
	fi
	log "starting PostgreSQL"
	local ver
	ver=$(ls /etc/postgresql | sort -V | tail -n1)
	as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
	for _ in $(seq 1 30); do
		pg_isready -q -h 127.0.0.1 -p 5432 && break
		sleep 1
	done
	pg_isready -h 127.0.0.1 -p 5432
}

ensure_redis() {
	if elsewhere "${REDIS_URL:-}" 6379 redis; then
		log "REDIS_URL names $where: no local Redis is checked or installed (make run connects to that one)"
		return
	fi
	command -v redis-cli >/dev/null || apt_install redis-tools
	if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then return; fi
	if ! command -v redis-server >/dev/null; then
		log "installing Redis from Debian's packages"
		apt_install redis-server
	fi
	log "starting Redis"
	redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
		--dir /tmp --logfile /tmp/sekali-redis.log
	for _ in $(seq 1 30); do
		redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break
		sleep 1
	done
	redis-cli -h 127.0.0.1 -p 6379 ping
}

# What `make ci` needs besides PostgreSQL and Redis.
ensure_tools() {
	command -v pg_isready >/dev/null || apt_install postgresql-client
	command -v redis-cli >/dev/null || apt_install redis-tools
	command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || apt_install pgbouncer
	command -v docker-compose >/dev/null || apt_install docker-compose
	command -v promtool >/dev/null || apt_install --no-install-recommends prometheus
	command -v make >/dev/null || apt_install make
}

[ $# -gt 0 ] || set -- postgres redis
for what in "$@"; do
	case $what in
	postgres) ensure_postgres ;;
	redis) ensure_redis ;;
	tools) ensure_tools ;;
	*) echo "scripts/services.sh: unknown service $what (postgres, redis, tools)" >&2; exit 2 ;;
	esac
done

#!/usr/bin/env bash
# Runs a go build or go install (with -v) and shows that it is moving,
# for make run on a fresh clone: its first build compiles every package
# the binaries import, the standard library's included, which takes
# minutes; later builds come from Go's build cache in seconds. WHY is
# said first. `-v` names each package as it is compiled; this prints a
# count every 50 of them, and a line when nothing has come for a while
# (the linker, a large package), so that a newcomer can tell it from a
# hang. Errors and downloads are printed as go writes them, and the
# command's failure is this script's.
#
#   scripts/build.sh WHY COMMAND...
set -euo pipefail

why=$1
shift
quiet=${BUILD_QUIET_SECONDS:-15}

echo "== $why"
start=$SECONDS
"$@" 2>&1 | {
	n=0
	while true; do
		if IFS= read -r -t "$quiet" line; then
			if [[ $line =~ ^[A-Za-z0-9._~/+-]+$ ]]; then # a package compiled
				n=$((n + 1))
				if ((n % 50 == 0)); then
					echo "   $n packages compiled ($((SECONDS - start)) s)"
				fi
			else
				printf '%s\n' "$line"
			fi
		elif (($? > 128)); then # nothing for a while
			echo "   still building ($((SECONDS - start)) s, $n packages compiled)"
		else
			break
		fi
	done
	if ((n > 0)); then
		echo "   $n packages compiled"
	fi
}
echo "== done in $((SECONDS - start)) s"

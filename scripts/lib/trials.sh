# Shared by scripts/kill-trials.sh and scripts/stall-trials.sh; source it.
#
# pick_victim OUT READY MIN VERB: waits until the collbench launcher
# $launcher writes a line matching READY to OUT (its ranks are running),
# then a random MIN to MIN+1.5 s more, so that the trial's signal lands
# anywhere in the run. It then sets victim_pid and victim (the rank) to one
# of the launcher's $NP workers, chosen at random, and returns 0; if the run
# ended first, it waits for the launcher, says the trial ($trial, $algo) is
# not counted, counts it in missed and returns 1.
pick_victim() {
  local out=$1 ready=$2 min=$3 verb=$4
  for _ in $(seq 1 300); do
    grep -q "$ready" "$out" 2>/dev/null && break
    sleep 0.05
  done
  sleep "$(awk -v r=$RANDOM -v m="$min" 'BEGIN { printf "%.3f", m + r / 32767 * 1.5 }')"
  local workers
  mapfile -t workers < <(pgrep -P "$launcher")
  if [ "${#workers[@]}" -ne "$NP" ]; then
    wait "$launcher"
    echo "trial $trial: $algo: the run ended before the $verb (workers: ${#workers[@]}); not counted"
    missed=$((missed + 1))
    return 1
  fi
  victim_pid=${workers[$((RANDOM % NP))]}
  victim=$(tr '\0' '\n' <"/proc/$victim_pid/environ" | sed -n 's/^RANK=//p')
}

# verdict OK FAILED CUT: adds leaked processes (those carrying
# COLLKIT_TRIAL_MARK=$mark) to the trial's $problems, then counts the trial
# in pass or fail and prints "trial N: ALGO: OK" or "...: FAILED" with the
# problems and the first CUT columns of the launcher's stderr ($err).
verdict() {
  local ok=$1 failed=$2 cut=$3 leaked
  leaked=$(grep -l "COLLKIT_TRIAL_MARK=$mark" /proc/[0-9]*/environ 2>/dev/null | wc -l)
  [ "$leaked" -eq 0 ] || problems+=("$leaked processes left behind")
  if [ "${#problems[@]}" -eq 0 ]; then
    pass=$((pass + 1))
    echo "trial $trial: $algo: $ok: ok"
  else
    fail=$((fail + 1))
    echo "trial $trial: $algo: $failed"
    printf '    %s\n' "${problems[@]}"
    sed 's/^/    | /' "$err" | cut -c1-"$cut"
  fi
}

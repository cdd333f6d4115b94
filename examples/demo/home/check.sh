#!/bin/sh
# The checks of tinycalc: the calculator's sums, then that every file ends
# with a newline.
status=0

check() {
	want=$1
	shift
	got=$(sh calc.sh "$@" 2>&1)
	args=${*:-(nothing)}
	if [ "$got" = "$want" ]; then
		echo "ok    calc $args = $got"
	else
		echo "FAIL  calc $args = $got, want $want"
		status=1
	fi
}

check 6 1 2 3
check 0
check -2 2 -4
# A stand-in for a slower test suite, so that the demo shows a running command.
sleep 1

for f in *.md *.txt *.sh; do
	if [ -n "$(tail -c 1 "$f")" ]; then
		echo "FAIL  $f does not end with a newline"
		status=1
	fi
done
echo "$(ls | wc -l | tr -d ' ') files checked"
exit $status

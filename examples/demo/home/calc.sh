#!/bin/sh
# Adds the numbers given as arguments and prints the sum.
sum=0
for n in "$@"; do
	sum=$((sum + n))
done
echo "$sum"

# Launch time vs number of processes (/bin/true workers), error bars = min-max of the round medians.
eval("set terminal ".term." size 1150,600")
set output outfile
# Ours first (warm colours, thicker), then the peers.
set linetype 1 lc rgb "#d62728" lw 3
set linetype 2 lc rgb "#ff7f0e" lw 3
set linetype 3 lc rgb "#1f77b4" lw 2
set linetype 4 lc rgb "#17becf" lw 2
set linetype 5 lc rgb "#2ca02c" lw 2
set linetype 6 lc rgb "#9467bd" lw 2
set linetype 7 lc rgb "#8c564b" lw 2
set title "launch + exit of np /bin/true processes on localhost (lower is better)"
set logscale x 2
set xrange [xmin/1.4:xmax*1.4]
set logscale y
set grid
set key outside right top box
set xlabel "processes (np)"
set ylabel "wall time, ms"
set datafile missing "-"
plot for [i=0:ncols-1] datafile using 1:(column(2+3*i)):(column(3+3*i)):(column(4+3*i)) \
       with yerrorlines pt 7 title columnhead(2+3*i)

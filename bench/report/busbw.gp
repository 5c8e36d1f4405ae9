# Bus bandwidth vs message size, one line per subject, error bars = min-max of the round medians.
# Variables from report.py: term, datafile, outfile, ncols, ceiling (GB/s, 0 = none), xtics set before.
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
set title "float32 allreduce, np=2 on localhost (higher is better)"
set logscale x 2
set xrange [xmin/1.4:xmax*1.4]
set grid
set key outside right top box
set xlabel "message size"
set ylabel "bus bandwidth, GB/s"
set yrange [0:*]
set datafile missing "-"
plot for [i=0:ncols-1] datafile using 1:(column(2+3*i)):(column(3+3*i)):(column(4+3*i)) \
       with yerrorlines pt 7 title columnhead(2+3*i), \
     (ceiling > 0 ? ceiling : 1/0) with lines dt 2 lc rgb "gray40" title "TCP loopback ceiling, per direction"

# Launch time vs number of processes (/bin/true workers), error bars = min-max of the round medians.
eval("set terminal ".term." size 960,640")
set output outfile
set title "launch + exit of np /bin/true processes on localhost (lower is better)"
set logscale x 2
set xrange [xmin/1.4:xmax*1.4]
set logscale y
set grid
set key below box
set xlabel "processes (np)" offset 0,0.6
set ylabel "wall time, ms"
set datafile missing "-"
plot for [i=0:ncols-1] datafile using 1:(column(2+3*i)):(column(3+3*i)):(column(4+3*i)) \
       with yerrorlines lw 2 pt 7 title columnhead(2+3*i)

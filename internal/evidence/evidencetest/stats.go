package evidencetest

import "math"

// ClopperPearson is the exact (Clopper-Pearson) two-sided 1 − alpha
// confidence interval of a binomial proportion, x successes in n trials.
func ClopperPearson(x, n int, alpha float64) (lo, hi float64) {
	// cdf is P(X ≤ k) for X ~ Binomial(n, p).
	cdf := func(k int, p float64) float64 {
		if p <= 0 {
			return 1
		}
		if p >= 1 {
			if k >= n {
				return 1
			}
			return 0
		}
		var sum float64
		for i := 0; i <= k; i++ {
			lc := lgamma(float64(n+1)) - lgamma(float64(i+1)) - lgamma(float64(n-i+1))
			sum += math.Exp(lc + float64(i)*math.Log(p) + float64(n-i)*math.Log1p(-p))
		}
		return sum
	}
	// solve finds p in [0, 1] with f(p) = target, f falling with p.
	solve := func(f func(float64) float64, target float64) float64 {
		a, b := 0.0, 1.0
		for range 100 {
			mid := (a + b) / 2
			if f(mid) > target {
				a = mid
			} else {
				b = mid
			}
		}
		return (a + b) / 2
	}
	hi = 1.0
	if x < n {
		hi = solve(func(p float64) float64 { return cdf(x, p) }, alpha/2)
	}
	if x > 0 {
		lo = solve(func(p float64) float64 { return cdf(x-1, p) }, 1-alpha/2)
	}
	return lo, hi
}

func lgamma(x float64) float64 {
	v, _ := math.Lgamma(x)
	return v
}

"""Fitting the model's few free constants to measured data, and predicted-vs-measured comparison."""

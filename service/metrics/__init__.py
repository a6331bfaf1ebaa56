"""What operators watch: mistake rates, the confusion matrix, the mistake bound, Prometheus."""

"""An online-learning perceptron service: predict now, learn from the label later."""

"""A worker's engine: its replicas of the models, the requests it batches into commits, and
predict, feedback and learn, through the model's writer."""

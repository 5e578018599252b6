print("activitycast")
